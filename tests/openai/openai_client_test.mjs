// The official `openai` npm package (version pinned in package.json / package-lock.json) against a
// real kvserve's OpenAI-compatible HTTP API (docs: README.md "OpenAI-compatible HTTP API").
//
// tests/openai_client_test.py starts kvserve with the flags a group needs, installs the package
// with `npm ci` and runs:   node openai_client_test.mjs GROUP
// GROUP: main  (auth off: every endpoint, streams, sampling, logprobs, the 400/404/405/413
//               errors, a disconnect mid-stream, a multi-turn conversation's cached tokens)
//        auth  (--auth-tokens: 401 without or with a wrong key, 200 with a listed one)
//        queue (--max-running 1 --max-waiting 1: a flood gets 429 with Retry-After)
//        drain (--max-running 1 --drain-grace 60s: SIGTERM with a backlog; new requests get 503,
//               the backlog finishes)
//        grace (--max-running 1 --drain-grace 100ms: SIGTERM mid-stream; the stream ends with an
//               error event)
// Environment: OPENAI_BASE_URL (http://127.0.0.1:PORT/v1), KVSERVE_METRICS_URL
// (http://127.0.0.1:PORT/metrics), KVSERVE_MODEL (the served model name), KVSERVE_API_KEY (auth:
// a listed token), KVSERVE_PID (drain, grace: the process to SIGTERM).
// Runs on Node.js 18 (Debian 12's) and later; the client never retries (maxRetries: 0), so every
// status the server sends is the one a test sees.
import assert from 'node:assert/strict';
import {test} from 'node:test';
import OpenAI from 'openai';

const BASE_URL = process.env.OPENAI_BASE_URL;
const METRICS_URL = process.env.KVSERVE_METRICS_URL;
const MODEL = process.env.KVSERVE_MODEL;
const ORIGIN = BASE_URL ? new URL(BASE_URL).origin : '';
const GROUP = process.argv[2];
const PROMPT = 'Once upon a time';
// A greedy request: the same output every time.
const GREEDY = {
  temperature: 0
};

function client(apiKey = 'unused-when-auth-is-off') {
  return new OpenAI({baseURL: BASE_URL, apiKey, maxRetries: 0, timeout: 60_000});
}

function userMessage(content) {
  return [{role: 'user', content}];
}

// Awaits `promise`, which must fail with an APIError of class `cls` whose status and error
// fields (code, type, param) equal `expected`'s; returns the error.
async function expectError(promise, cls, expected) {
  let err;
  try {
    await promise;
  } catch (e) {
    err = e;
  }
  assert.ok(err instanceof cls, `expected ${cls.name}, got ${err && err.stack ? err.stack : err}`);
  for (const [key, value] of Object.entries(expected)) {
    assert.equal(err[key], value, `${key} of ${err.message}`);
  }
  assert.equal(typeof err.error.message, 'string');
  assert.ok(err.error.message.length > 0);
  return err;
}

// A request the SDK cannot make (malformed JSON, no auth header, a wrong method): plain fetch.
async function raw(method, path, {body, headers = {}} = {}) {
  const response = await fetch(ORIGIN + path, {method, body, headers});
  const text = await response.text();
  return {status: response.status, headers: response.headers, text};
}

function errorBody(text) {
  const body = JSON.parse(text);
  assert.equal(typeof body.error, 'object', text);
  return body.error;
}

async function scrape() {
  const response = await fetch(METRICS_URL);
  assert.equal(response.status, 200);
  return response.text();
}

// Sum of the samples of `name` in Prometheus text `text` whose labels include `labels`.
function metricValue(text, name, labels = {}) {
  let total = 0;
  for (const line of text.split('\n')) {
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)/.exec(line);
    if (!m || m[1] !== name) continue;
    const got =
        Object.fromEntries([...(m[2] || '').matchAll(/(\w+)="([^"]*)"/g)].map((g) => [g[1], g[2]]));
    if (Object.entries(labels).every(([k, v]) => got[k] === v)) total += Number(m[3]);
  }
  return total;
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// Calls `fn` every 100 ms until it returns a truthy value (returned); fails after `ms`.
async function poll(fn, ms, what) {
  const end = Date.now() + ms;
  let last;
  while (Date.now() < end) {
    last = await fn();
    if (last) return last;
    await sleep(100);
  }
  assert.fail(`timed out after ${ms} ms waiting for ${what} (last: ${JSON.stringify(last)})`);
}

function checkUsage(usage, completionTokens) {
  assert.ok(usage.prompt_tokens > 0, JSON.stringify(usage));
  if (completionTokens !== undefined) assert.equal(usage.completion_tokens, completionTokens);
  assert.equal(usage.total_tokens, usage.prompt_tokens + usage.completion_tokens);
  const cached = usage.prompt_tokens_details.cached_tokens;
  assert.ok(Number.isInteger(cached) && cached >= 0 && cached <= usage.prompt_tokens);
}

// Reads a streamed chat completion: the content and finish reason of each choice, the usage
// chunk, and checks the chunk shapes the spec fixes.
async function readChatStream(stream, {includeUsage}) {
  const choices = new Map();
  let usage = null;
  let id = null;
  for await (const chunk of stream) {
    assert.equal(chunk.object, 'chat.completion.chunk');
    assert.equal(chunk.model, MODEL);
    assert.ok(chunk.id.startsWith('chatcmpl-'), chunk.id);
    id ??= chunk.id;
    assert.equal(chunk.id, id, 'one id for every chunk');
    if (includeUsage) {
      assert.ok('usage' in chunk, JSON.stringify(chunk));
    }
    if (chunk.choices.length === 0) {
      assert.ok(includeUsage, 'a chunk without choices only carries usage');
      assert.equal(usage, null, 'one usage chunk');
      usage = chunk.usage;
      continue;
    }
    assert.ok(chunk.usage === null || chunk.usage === undefined, JSON.stringify(chunk));
    for (const choice of chunk.choices) {
      // The first chunk of a choice carries the role; kvserve sends its first text with it
      // (OpenAI sends content "" first), and the last chunk, with finish_reason, may carry text.
      let c = choices.get(choice.index);
      if (!c) {
        assert.equal(choice.delta.role, 'assistant', 'first chunk of a choice');
        c = {content: '', finish: null};
        choices.set(choice.index, c);
      } else {
        assert.equal(choice.delta.role, undefined, 'the role comes once');
      }
      assert.equal(c.finish, null, 'nothing after a choice finished');
      if (choice.delta.content !== undefined) {
        assert.equal(typeof choice.delta.content, 'string');
        c.content += choice.delta.content;
      }
      if (choice.finish_reason) {
        c.finish = choice.finish_reason;
      } else {
        assert.equal(choice.finish_reason, null);
      }
    }
  }
  if (includeUsage) assert.notEqual(usage, null, 'include_usage: a final usage chunk');
  return {choices, usage};
}

async function chatText(oai, messages, extra = {}) {
  const r = await oai.chat.completions.create({model: MODEL, messages, ...GREEDY, ...extra});
  return r;
}

// ---------------------------------------------------------------------------------------------
// main: auth off
function mainGroup() {
  const oai = client();

  test('GET /health answers ok', async () => {
    const r = await raw('GET', '/health');
    assert.equal(r.status, 200, r.text);
    assert.deepEqual(JSON.parse(r.text), {status: 'ok'});
  });

  test('models: list and retrieve; an unknown id is 404 model_not_found', async () => {
    const list = await oai.models.list();
    const models = [];
    for await (const m of list) models.push(m);
    assert.equal(models.length, 1);
    assert.equal(models[0].id, MODEL);
    assert.equal(models[0].object, 'model');
    assert.equal(models[0].owned_by, 'kvserve');
    assert.ok(Number.isInteger(models[0].created) && models[0].created > 1.6e9);
    const one = await oai.models.retrieve(MODEL);
    assert.deepEqual(one, models[0]);
    await expectError(
        oai.models.retrieve('no-such-model'), OpenAI.NotFoundError,
        {status: 404, code: 'model_not_found'});
  });

  test('chat completion: shape, usage, length', async () => {
    const r = await chatText(oai, userMessage(PROMPT), {max_tokens: 16, ignore_eos: true});
    assert.ok(r.id.startsWith('chatcmpl-'), r.id);
    assert.equal(r.object, 'chat.completion');
    assert.equal(r.model, MODEL);
    assert.ok(Math.abs(r.created - Date.now() / 1000) < 600, `created ${r.created}`);
    assert.match(r.system_fingerprint, /^fp_[0-9a-f]+$/);
    assert.equal(r.choices.length, 1);
    const [choice] = r.choices;
    assert.equal(choice.index, 0);
    assert.equal(choice.message.role, 'assistant');
    assert.equal(typeof choice.message.content, 'string');
    assert.ok(choice.message.content.length > 0);
    assert.equal(choice.finish_reason, 'length');
    assert.equal(choice.logprobs, null);
    checkUsage(r.usage, 16);
    // max_completion_tokens is max_tokens' newer name; content parts equal a string.
    const parts = await chatText(
        oai, [{role: 'user', content: [{type: 'text', text: PROMPT}]}],
        {max_completion_tokens: 16, ignore_eos: true});
    assert.equal(parts.choices[0].message.content, choice.message.content);
    assert.equal(parts.usage.completion_tokens, 16);
  });

  test('chat: system and developer roles; unknown fields are ignored', async () => {
    const sys = await chatText(
        oai, [{role: 'system', content: 'Be brief.'}, ...userMessage(PROMPT)],
        {max_tokens: 8, ignore_eos: true});
    const dev = await chatText(
        oai, [{role: 'developer', content: 'Be brief.'}, ...userMessage(PROMPT)],
        {max_tokens: 8, ignore_eos: true, user: 'someone', some_future_field: {a: 1}});
    assert.equal(dev.choices[0].message.content, sys.choices[0].message.content);
    assert.equal(dev.usage.prompt_tokens, sys.usage.prompt_tokens);
  });

  test('chat stream: chunks add up to the non-streamed reply, with and without usage', async () => {
    const messages = userMessage(PROMPT);
    const whole = await chatText(oai, messages, {max_tokens: 24, ignore_eos: true});
    for (const includeUsage of [false, true]) {
      const stream = await oai.chat.completions.create({
        model: MODEL,
        messages,
        ...GREEDY,
        max_tokens: 24,
        ignore_eos: true,
        stream: true,
        ...(includeUsage ? {stream_options: {include_usage: true}} : {}),
      });
      const got = await readChatStream(stream, {includeUsage});
      assert.equal(got.choices.size, 1);
      assert.equal(got.choices.get(0).content, whole.choices[0].message.content);
      assert.equal(got.choices.get(0).finish, 'length');
      if (includeUsage) {
        assert.equal(got.usage.prompt_tokens, whole.usage.prompt_tokens);
        checkUsage(got.usage, 24);
      } else {
        assert.equal(got.usage, null);
      }
    }
  });

  test('chat: n choices, streamed and not', async () => {
    const r = await chatText(oai, userMessage(PROMPT), {n: 2, max_tokens: 8, ignore_eos: true});
    assert.deepEqual(r.choices.map((c) => c.index), [0, 1]);
    // Greedy: both choices are the same text.
    assert.equal(r.choices[0].message.content, r.choices[1].message.content);
    checkUsage(r.usage, 16);
    const stream = await oai.chat.completions.create({
      model: MODEL,
      messages: userMessage(PROMPT),
      ...GREEDY,
      n: 2,
      max_tokens: 8,
      ignore_eos: true,
      stream: true,
      stream_options: {include_usage: true},
    });
    const got = await readChatStream(stream, {includeUsage: true});
    assert.deepEqual([...got.choices.keys()].sort(), [0, 1]);
    for (const c of got.choices.values()) {
      assert.equal(c.content, r.choices[0].message.content);
      assert.equal(c.finish, 'length');
    }
    assert.equal(got.usage.completion_tokens, 16);
  });

  test('chat: stop strings end the reply before them (finish_reason stop)', async () => {
    const messages = userMessage(PROMPT);
    const full = (await chatText(oai, messages, {max_tokens: 40, ignore_eos: true}))
                     .choices[0]
                     .message.content;
    // A stop string from the middle of the greedy reply: the reply ends right before it.
    const stop = full.slice(12, 15);
    const cut = full.indexOf(stop);
    assert.ok(stop.length === 3 && cut >= 0 && cut <= 12, JSON.stringify(full));
    for (const form of [stop, ['zzqzz', stop]]) {
      const r = await chatText(oai, messages, {max_tokens: 40, ignore_eos: true, stop: form});
      assert.equal(r.choices[0].finish_reason, 'stop', JSON.stringify(form));
      assert.equal(r.choices[0].message.content, full.slice(0, cut));
    }
    const stream = await oai.chat.completions.create({
      model: MODEL,
      messages,
      ...GREEDY,
      max_tokens: 40,
      ignore_eos: true,
      stop,
      stream: true,
    });
    const got = await readChatStream(stream, {includeUsage: false});
    assert.equal(got.choices.get(0).content, full.slice(0, cut));
    assert.equal(got.choices.get(0).finish, 'stop');
  });

  test('chat: the same seed gives the same sampled reply', async () => {
    const sample = async (seed) => (await oai.chat.completions.create({
                                     model: MODEL,
                                     messages: userMessage(PROMPT),
                                     temperature: 1,
                                     seed,
                                     max_tokens: 32,
                                     ignore_eos: true,
                                   }))
                                       .choices[0]
                                       .message.content;
    const a = await sample(1234);
    assert.equal(await sample(1234), a);
    const others = [await sample(1), await sample(2), await sample(3)];
    assert.ok(others.some((o) => o !== a), 'different seeds sample different replies');
  });

  test('chat: logprobs with top_logprobs', async () => {
    const r = await chatText(
        oai, userMessage(PROMPT),
        {max_tokens: 8, ignore_eos: true, logprobs: true, top_logprobs: 3});
    const content = r.choices[0].logprobs.content;
    assert.equal(content.length, 8);
    let text = '';
    for (const t of content) {
      assert.equal(typeof t.token, 'string');
      assert.ok(t.logprob <= 0, JSON.stringify(t));
      assert.deepEqual(t.bytes, [...Buffer.from(t.token, 'utf8')]);
      assert.equal(t.top_logprobs.length, 3);
      for (let i = 1; i < 3; ++i)
        assert.ok(t.top_logprobs[i - 1].logprob >= t.top_logprobs[i].logprob);
      // Greedy: the sampled token is the most likely one.
      assert.equal(t.top_logprobs[0].token, t.token);
      assert.ok(Math.abs(t.top_logprobs[0].logprob - t.logprob) < 1e-4);
      text += t.token;
    }
    assert.equal(text, r.choices[0].message.content);
    // Streamed: the same per-token logprobs come with the chunks.
    const stream = await oai.chat.completions.create({
      model: MODEL,
      messages: userMessage(PROMPT),
      ...GREEDY,
      max_tokens: 8,
      ignore_eos: true,
      logprobs: true,
      top_logprobs: 3,
      stream: true,
    });
    const streamed = [];
    for await (const chunk of stream) {
      for (const c of chunk.choices) streamed.push(...(c.logprobs?.content ?? []));
    }
    assert.deepEqual(streamed.map((t) => t.token), content.map((t) => t.token));
  });

  test('completions: text, echo, token-id prompts, stream, usage', async () => {
    const r =
        await oai.completions.create({model: MODEL, prompt: PROMPT, ...GREEDY, max_tokens: 24});
    assert.ok(r.id.startsWith('cmpl-'), r.id);
    assert.equal(r.object, 'text_completion');
    assert.equal(r.model, MODEL);
    assert.equal(r.choices.length, 1);
    const text = r.choices[0].text;
    // stories260K's greedy continuation (as tests/service_python_test.py checks over gRPC).
    assert.ok(text.startsWith(', there was a little girl'), JSON.stringify(text));
    assert.ok(['length', 'stop'].includes(r.choices[0].finish_reason));
    checkUsage(r.usage);
    const listed =
        await oai.completions.create({model: MODEL, prompt: [PROMPT], ...GREEDY, max_tokens: 24});
    assert.equal(listed.choices[0].text, text);
    const echo = await oai.completions.create(
        {model: MODEL, prompt: PROMPT, echo: true, ...GREEDY, max_tokens: 24});
    assert.equal(echo.choices[0].text, PROMPT + text);

    const stream = await oai.completions.create({
      model: MODEL,
      prompt: PROMPT,
      ...GREEDY,
      max_tokens: 24,
      stream: true,
      stream_options: {include_usage: true},
    });
    let streamed = '';
    let finish = null;
    let usage = null;
    for await (const chunk of stream) {
      assert.equal(chunk.object, 'text_completion');
      if (chunk.choices.length === 0) {
        usage = chunk.usage;
        continue;
      }
      streamed += chunk.choices[0].text;
      finish = chunk.choices[0].finish_reason ?? finish;
    }
    assert.equal(streamed, text);
    assert.equal(finish, r.choices[0].finish_reason);
    assert.deepEqual(usage, r.usage);

    // Token ids as the prompt are used as they are (no BOS added); an id outside the vocabulary
    // is a 400 on the prompt.
    const ids = [1, 400, 401, 402];
    const byIds = await oai.completions.create(
        {model: MODEL, prompt: ids, ...GREEDY, max_tokens: 4, ignore_eos: true});
    assert.equal(byIds.usage.prompt_tokens, ids.length);
    assert.equal(byIds.usage.completion_tokens, 4);
    await expectError(
        oai.completions.create({model: MODEL, prompt: [1, 1 << 30], max_tokens: 4}),
        OpenAI.BadRequestError, {status: 400, param: 'prompt[1]'});
  });

  test('completions: logprobs', async () => {
    const r = await oai.completions.create({
      model: MODEL,
      prompt: PROMPT,
      ...GREEDY,
      max_tokens: 8,
      ignore_eos: true,
      logprobs: 2,
    });
    const lp = r.choices[0].logprobs;
    assert.equal(lp.tokens.length, 8);
    assert.equal(lp.token_logprobs.length, 8);
    assert.equal(lp.top_logprobs.length, 8);
    assert.equal(lp.text_offset.length, 8);
    assert.equal(lp.tokens.join(''), r.choices[0].text);
    for (let i = 0; i < 8; ++i) {
      assert.ok(lp.token_logprobs[i] <= 0);
      const top = Object.entries(lp.top_logprobs[i]);
      assert.ok(top.length >= 1 && top.length <= 2, JSON.stringify(lp.top_logprobs[i]));
      assert.ok(Math.abs(Math.max(...top.map(([, v]) => v)) - lp.token_logprobs[i]) < 1e-4);
      if (i > 0) assert.equal(lp.text_offset[i] - lp.text_offset[i - 1], lp.tokens[i - 1].length);
    }
  });

  test('400: malformed JSON, wrong types and ranges name the field', async () => {
    const bad = await raw(
        'POST', '/v1/chat/completions',
        {body: '{"model": ', headers: {'content-type': 'application/json'}});
    assert.equal(bad.status, 400, bad.text);
    const e = errorBody(bad.text);
    assert.equal(e.type, 'invalid_request_error');
    assert.equal(e.code, 'invalid_json');

    const cases = [
      [{temperature: -1}, 'temperature', 'invalid_value'],
      [{temperature: 'hot'}, 'temperature', 'invalid_value'],
      [{max_tokens: 0}, 'max_tokens', 'invalid_value'],
      [{top_logprobs: 21, logprobs: true}, 'top_logprobs', 'invalid_value'],
      [{n: 9}, 'n', 'invalid_value'],
      [{messages: [{role: 'wizard', content: 'hi'}]}, 'messages[0].role', 'invalid_value'],
      [
        {messages: [{role: 'user', content: 'hi'}, {role: 'robot', content: 'x'}]},
        'messages[1].role', 'invalid_value'
      ],
      [{messages: undefined}, 'messages', 'missing_required_parameter'],
      [{model: undefined}, 'model', 'missing_required_parameter'],
    ];
    for (const [fields, param, code] of cases) {
      const body = {model: MODEL, messages: userMessage(PROMPT), max_tokens: 4, ...fields};
      await expectError(
          oai.chat.completions.create(body), OpenAI.BadRequestError,
          {status: 400, type: 'invalid_request_error', param, code});
    }
    await expectError(
        oai.completions.create({model: MODEL, prompt: PROMPT, suffix: 'end', max_tokens: 4}),
        OpenAI.BadRequestError, {status: 400, param: 'suffix'});
    await expectError(
        oai.completions.create({model: MODEL, prompt: PROMPT, logprobs: 21, max_tokens: 4}),
        OpenAI.BadRequestError, {status: 400, param: 'logprobs'});
    // A session id in the body and a different one in the header.
    await expectError(
        oai.chat.completions.create(
            {model: MODEL, messages: userMessage(PROMPT), max_tokens: 4, session_id: 'one'},
            {headers: {'kvserve-session-id': 'two'}}),
        OpenAI.BadRequestError, {status: 400, param: 'session_id'});
  });

  test('404: unknown model and unknown path; 405 with Allow', async () => {
    await expectError(
        oai.chat.completions.create({model: 'gpt-nope', messages: userMessage(PROMPT)}),
        OpenAI.NotFoundError,
        {status: 404, type: 'invalid_request_error', code: 'model_not_found', param: 'model'});
    await expectError(
        oai.completions.create({model: 'gpt-nope', prompt: PROMPT}), OpenAI.NotFoundError,
        {status: 404, code: 'model_not_found', param: 'model'});
    await expectError(
        oai.get('/no/such/path'), OpenAI.NotFoundError, {status: 404, code: 'not_found'});
    await expectError(
        oai.post('/embeddings', {body: {model: MODEL, input: 'x'}}), OpenAI.NotFoundError,
        {status: 404, code: 'not_found'});
    const wrong = await raw('GET', '/v1/chat/completions');
    assert.equal(wrong.status, 405, wrong.text);
    assert.match(wrong.headers.get('allow'), /POST/);
    assert.equal(errorBody(wrong.text).code, 'method_not_allowed');
  });

  test('413: a body over --max-message-bytes', async () => {
    const huge = 'a'.repeat(80 * 1024);
    const err = await expectError(
        oai.chat.completions.create({model: MODEL, messages: userMessage(huge)}), OpenAI.APIError,
        {status: 413, type: 'invalid_request_error', code: 'request_too_large'});
    assert.equal(err.constructor, OpenAI.APIError, 'the SDK has no class of its own for 413');
    // The server still answers on a new request.
    const r = await chatText(oai, userMessage(PROMPT), {max_tokens: 2});
    assert.equal(r.choices.length, 1);
  });

  test('a multi-turn conversation reports cached tokens on later turns', async () => {
    const nonce = Math.random().toString(36).slice(2, 10);
    const messages = [
      {
        role: 'system',
        content: `Story ${nonce}. You tell short stories to children about animals ` +
            'who live in a big green park, and every story ends happily.'
      },
      {
        role: 'user',
        content: 'Once upon a time, there was a little girl named Lily. She liked to ' +
            'play in the park with her red ball and her small brown dog.'
      },
    ];
    const usages = [];
    for (const next of ['What did the dog do next?', 'And then what happened to the ball?']) {
      const r = await chatText(oai, messages, {max_tokens: 16});
      checkUsage(r.usage);
      usages.push(r.usage);
      messages.push(
          {role: 'assistant', content: r.choices[0].message.content},
          {role: 'user', content: next});
    }
    const last = await chatText(oai, messages, {max_tokens: 16});
    usages.push(last.usage);
    assert.ok(
        usages[0].prompt_tokens >= 64, `turn 1 prompt long enough: ${JSON.stringify(usages[0])}`);
    const cached = usages.map((u) => u.prompt_tokens_details.cached_tokens);
    // Each later turn reuses the KV of the previous turn's prompt (whole KV blocks of it).
    for (let i = 1; i < usages.length; ++i) {
      assert.ok(cached[i] >= 64 && cached[i] > cached[i - 1], JSON.stringify(usages));
      assert.ok(cached[i] < usages[i].prompt_tokens, JSON.stringify(usages));
    }
  });

  test('a client disconnect mid-stream cancels the generation', async () => {
    const before = await scrape();
    const labels = {protocol: 'http', method: 'chat.completions', code: 'cancelled'};
    const cancelled0 = metricValue(before, 'kvserve_request_finished_total', {reason: 'cancelled'});
    const rpc0 = metricValue(before, 'kvserve_rpc_requests_total', labels);
    const abort = new AbortController();
    const stream = await oai.chat.completions.create(
        {
          model: MODEL,
          messages: userMessage(PROMPT),
          max_tokens: 480,
          ignore_eos: true,
          stream: true,
        },
        {signal: abort.signal});
    let contentChunks = 0;
    let finished = false;
    try {
      for await (const chunk of stream) {
        if (chunk.choices[0]?.finish_reason) finished = true;
        if (chunk.choices[0]?.delta?.content && ++contentChunks === 2) abort.abort();
      }
    } catch (e) {
      assert.ok(e instanceof OpenAI.APIUserAbortError, String(e));
    }
    assert.ok(contentChunks >= 2);
    assert.ok(!finished, 'aborted before the end');
    await poll(async () => {
      const now = await scrape();
      return metricValue(now, 'kvserve_request_finished_total', {reason: 'cancelled'}) >
          cancelled0 &&
          metricValue(now, 'kvserve_rpc_requests_total', labels) > rpc0;
    }, 20_000, 'a cancelled request and a cancelled chat.completions in /metrics');
  });
}

// ---------------------------------------------------------------------------------------------
// auth: --auth-tokens
function authGroup() {
  const key = process.env.KVSERVE_API_KEY;

  test('401 without a key or with an unknown one; 200 with a listed key', async () => {
    const none = await raw('POST', '/v1/chat/completions', {
      body: JSON.stringify({model: MODEL, messages: userMessage(PROMPT), max_tokens: 4}),
      headers: {'content-type': 'application/json'},
    });
    assert.equal(none.status, 401, none.text);
    const e = errorBody(none.text);
    assert.equal(e.type, 'invalid_request_error');
    assert.equal(e.code, 'invalid_api_key');
    for (const call
             of [(c) => c.models.list(),
                (c) => c.chat.completions.create(
                    {model: MODEL, messages: userMessage(PROMPT), max_tokens: 4}),
                (c) => c.completions.create({model: MODEL, prompt: PROMPT, max_tokens: 4})]) {
      await expectError(
          call(client('not-a-listed-token')), OpenAI.AuthenticationError,
          {status: 401, code: 'invalid_api_key'});
    }
    // Nothing about the model leaks without a key.
    const models = await raw('GET', '/v1/models');
    assert.equal(models.status, 401);
    assert.ok(!models.text.includes(MODEL), models.text);

    const oai = client(key);
    const list = await oai.models.list();
    assert.equal(list.data[0].id, MODEL);
    const r = await oai.chat.completions.create(
        {model: MODEL, messages: userMessage(PROMPT), max_tokens: 4});
    assert.equal(r.choices.length, 1);
    const stream =
        await oai.completions.create({model: MODEL, prompt: PROMPT, max_tokens: 4, stream: true});
    let n = 0;
    for await (const chunk of stream) n += chunk.choices.length;
    assert.ok(n > 0);
  });

  test('GET /health needs no key', async () => {
    const r = await raw('GET', '/health');
    assert.equal(r.status, 200, r.text);
  });
}

// ---------------------------------------------------------------------------------------------
// queue: --max-running 1 --max-waiting 1
function queueGroup() {
  const oai = client();

  test('a full queue answers 429 rate_limit_exceeded with Retry-After', async () => {
    const calls = [];
    for (let i = 0; i < 12; ++i) {
      const body = {model: MODEL, messages: userMessage(PROMPT), max_tokens: 300, ignore_eos: true};
      if (i % 2 === 0) {
        calls.push(oai.chat.completions.create(body).then((r) => r.choices[0].finish_reason));
      } else {
        // Streamed: queue admission comes before the stream starts, so the status is 429 too.
        calls.push(oai.chat.completions.create({...body, stream: true}).then(async (stream) => {
          let finish = null;
          for await (const chunk of stream) finish = chunk.choices[0]?.finish_reason ?? finish;
          return finish;
        }));
      }
    }
    const results = await Promise.allSettled(calls);
    const ok = results.filter((r) => r.status === 'fulfilled');
    const refused = results.filter((r) => r.status === 'rejected').map((r) => r.reason);
    assert.ok(ok.length >= 1 && ok.every((r) => r.value === 'length'), JSON.stringify(ok));
    assert.ok(refused.length >= 1, 'the flood overflows one running and one waiting request');
    for (const err of refused) {
      assert.ok(err instanceof OpenAI.RateLimitError, String(err && err.stack));
      assert.equal(err.status, 429);
      assert.equal(err.type, 'rate_limit_exceeded');
      assert.equal(err.code, 'rate_limit_exceeded');
      const retryAfter = err.headers.get('retry-after');
      assert.match(String(retryAfter), /^[1-9][0-9]*$/, `Retry-After: ${retryAfter}`);
    }
  });
}

// ---------------------------------------------------------------------------------------------
// drain: --max-running 1 --drain-grace 60s; this test sends the SIGTERM.
function drainGroup() {
  const oai = client();
  const BACKLOG = 8;
  const TOKENS = 400;

  test(
      'while draining: 503 service_unavailable with Retry-After; in-flight requests finish',
      async () => {
        const finished0 = metricValue(await scrape(), 'kvserve_request_finished_total');
        const backlog = [];
        for (let i = 0; i < BACKLOG; ++i) {
          const stream = i % 2 === 1;
          backlog.push(oai.chat.completions
                           .create({
                             model: MODEL,
                             messages: userMessage(PROMPT),
                             max_tokens: TOKENS,
                             ignore_eos: true,
                             stream,
                             ...(stream ? {stream_options: {include_usage: true}} : {}),
                           })
                           .then(async (r) => {
                             if (!stream) return r.usage.completion_tokens;
                             let usage = null;
                             for await (const chunk of r) usage = chunk.usage ?? usage;
                             return usage.completion_tokens;
                           })
                           .then(
                               (value) => ({value}),
                               (reason) => ({reason})));  // handled at once: awaited last
        }
        // Every backlog request is in the engine (one running, the rest waiting) before SIGTERM.
        await poll(async () => {
          const m = await scrape();
          const inEngine = metricValue(m, 'kvserve_engine_requests_running') +
              metricValue(m, 'kvserve_engine_requests_waiting') +
              metricValue(m, 'kvserve_request_finished_total') - finished0;
          return inEngine >= BACKLOG;
        }, 20_000, `${BACKLOG} requests in the engine`);
        process.kill(Number(process.env.KVSERVE_PID), 'SIGTERM');
        await poll(async () => (await raw('GET', '/health')).status === 503, 10_000, '/health 503');
        const health = await raw('GET', '/health');
        assert.equal(health.status, 503);

        for (const call
                 of [() => oai.chat.completions.create(
                         {model: MODEL, messages: userMessage(PROMPT), max_tokens: 4}),
                    () => oai.chat.completions.create(
                        {model: MODEL, messages: userMessage(PROMPT), max_tokens: 4, stream: true}),
                    () => oai.completions.create({model: MODEL, prompt: PROMPT, max_tokens: 4}),
        ]) {
          const err = await expectError(
              call(), OpenAI.InternalServerError,
              {status: 503, type: 'server_error', code: 'service_unavailable'});
          assert.match(String(err.headers.get('retry-after')), /^[0-9]+$/);
        }
        for (const r of await Promise.all(backlog)) {
          assert.equal(r.reason, undefined, String(r.reason && r.reason.stack));
          assert.equal(r.value, TOKENS);
        }
      });
}

// ---------------------------------------------------------------------------------------------
// grace: --max-running 1 --drain-grace 100ms; this test sends the SIGTERM.
function graceGroup() {
  const oai = client();

  test('a stream cut by the end of the drain grace ends with an error event', async () => {
    // Three choices of 480 tokens, one at a time: far more work than the grace allows.
    const stream = await oai.chat.completions.create({
      model: MODEL,
      messages: userMessage(PROMPT),
      n: 3,
      max_tokens: 480,
      ignore_eos: true,
      stream: true,
    });
    let text = '';
    let err;
    try {
      for await (const chunk of stream) {
        const content = chunk.choices[0]?.delta?.content ?? '';
        if (content && !text) process.kill(Number(process.env.KVSERVE_PID), 'SIGTERM');
        text += content;
      }
    } catch (e) {
      err = e;
    }
    // "data: {"error": ...}" after the stream started: the SDK throws it (no HTTP status then).
    assert.ok(err instanceof OpenAI.APIError, String(err && err.stack));
    assert.equal(err.status, undefined);
    assert.equal(err.error.type, 'server_error');
    assert.equal(err.error.code, 'service_unavailable');
    assert.ok(text.length > 0);
  });
}

const GROUPS = {
  main: mainGroup,
  auth: authGroup,
  queue: queueGroup,
  drain: drainGroup,
  grace: graceGroup
};
if (!GROUPS[GROUP] || !BASE_URL || !METRICS_URL || !MODEL) {
  console.error(
      'usage: OPENAI_BASE_URL=... KVSERVE_METRICS_URL=... KVSERVE_MODEL=... ' +
      `node openai_client_test.mjs ${Object.keys(GROUPS).join('|')}`);
  process.exit(2);
}
GROUPS[GROUP]();
