"""The layering is checked: every #include of every C++ file obeys the layer table of
docs/design.md ("Processes and layers"), and the table allows nothing the code does not use.

The table is the one whose header row is `| layer | files | may include |`:
  - layer: a backticked name;
  - files: backticked patterns, a folder (`cache/`), a file (`cache/record_transport.h`) or a
    glob (`cache/remote_cache_client*`); a file belongs to the layer of its most specific
    pattern (a file or glob over a folder, a longer pattern over a shorter one of its kind);
  - may include: backticked layer names, or `*` for any layer. A layer may always include
    itself.
An include "a/b.h" (or <a/b.h>) belongs to the layer of the pattern it matches. One whose first
component is neither a project folder nor a table pattern's (absl/, grpcpp/, gtest/, ...) is a
third-party header and not checked. A C++ file in a folder that no row names is an error, so a
new top-level folder needs a row.

Fails naming file:line for an include the table forbids, and names every allowance of the
table that no include uses (the table then says more than the code).

Usage: /usr/bin/python3 include_layering_test.py [SOURCE_DIR]   (default: this file's ../)
"""
import fnmatch
import os
import re
import sys
import unittest

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                       os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
del sys.argv[1:]
DESIGN = os.path.join(ROOT, "docs", "design.md")
CXX_SUFFIXES = (".h", ".cc", ".inc")
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^">]+)[">]')
HEADER = ["layer", "files", "may include"]


def cells_of(line):
    return [c.strip() for c in line.strip().strip("|").split("|")]


def parse_table(text, source=DESIGN):
    """Returns ({layer: [pattern]}, {layer: set of layers, or None for any})."""
    lines = text.splitlines()
    for start, line in enumerate(lines):
        if line.lstrip().startswith("|") and [c.lower() for c in cells_of(line)] == HEADER:
            break
    else:
        raise ValueError(f"{source}: no table with the header | layer | files | may include |")
    patterns, allowed = {}, {}
    for number, line in enumerate(lines[start + 2:], start + 3):
        if not line.lstrip().startswith("|"):
            break
        cells = cells_of(line)
        if len(cells) != 3:
            raise ValueError(f"{source}:{number}: expected 3 cells, got {len(cells)}")
        names = re.findall(r"`([^`]+)`", cells[0])
        if len(names) != 1:
            raise ValueError(f"{source}:{number}: the layer cell needs one `name`")
        layer = names[0]
        if layer in patterns:
            raise ValueError(f"{source}:{number}: layer {layer} listed twice")
        patterns[layer] = re.findall(r"`([^`]+)`", cells[1])
        if not patterns[layer]:
            raise ValueError(f"{source}:{number}: layer {layer} names no files")
        uses = re.findall(r"`([^`]+)`", cells[2])
        allowed[layer] = None if "*" in uses else set(uses)
    for layer, uses in allowed.items():
        for use in sorted(uses or ()):
            if use not in patterns:
                raise ValueError(f"{source}: layer {layer} may include unknown layer {use}")
    return patterns, allowed


def specificity(pattern):
    # Files and globs beat folders; a longer pattern beats a shorter one of its kind.
    return (0 if pattern.endswith("/") else 1, len(pattern))


def layer_of(path, patterns):
    """The layer of a source-relative path, or None when no pattern matches it."""
    best, best_key = None, None
    for layer, pats in patterns.items():
        for p in pats:
            hit = path.startswith(p) if p.endswith("/") else fnmatch.fnmatchcase(path, p)
            if hit and (best_key is None or specificity(p) > best_key):
                best, best_key = layer, specificity(p)
    return best


def is_build_dir(path):
    return os.path.exists(os.path.join(path, "CMakeCache.txt"))


def project_folders():
    return {name for name in os.listdir(ROOT)
            if os.path.isdir(os.path.join(ROOT, name)) and not name.startswith(".") and
            not is_build_dir(os.path.join(ROOT, name))}


def cxx_files(folders):
    for folder in sorted(folders):
        for dirpath, dirnames, filenames in os.walk(os.path.join(ROOT, folder)):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and
                                 not is_build_dir(os.path.join(dirpath, d)))
            for f in sorted(filenames):
                if f.endswith(CXX_SUFFIXES):
                    yield os.path.relpath(os.path.join(dirpath, f), ROOT)


def check(patterns, allowed):
    """Returns (violations, unused allowances, number of project includes checked)."""
    folders = project_folders()
    roots = folders | {p.split("/")[0] for pats in patterns.values() for p in pats}
    violations, used, checked = [], set(), 0
    for path in cxx_files(folders):
        layer = layer_of(path, patterns)
        if layer is None:
            violations.append(f"{path}: no row of the layer table in docs/design.md holds it")
            continue
        with open(os.path.join(ROOT, path), encoding="utf-8", errors="replace") as f:
            for number, line in enumerate(f, 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                target = m.group(2).strip()
                if "/" not in target:
                    if m.group(1) == '"' and os.path.exists(
                            os.path.join(ROOT, os.path.dirname(path), target)):
                        violations.append(f"{path}:{number}: #include \"{target}\": name "
                                          "project headers from the source root")
                    continue
                if target.split("/")[0] not in roots:
                    continue  # a third-party header
                checked += 1
                target_layer = layer_of(target, patterns)
                if target_layer is None:
                    violations.append(f"{path}:{number}: #include \"{target}\": no row of the "
                                      "layer table in docs/design.md holds it")
                    continue
                if target_layer == layer:
                    continue
                used.add((layer, target_layer))
                may = allowed[layer]
                if may is not None and target_layer not in may:
                    violations.append(f"{path}:{number}: #include \"{target}\": layer {layer} "
                                      f"may not include layer {target_layer} (docs/design.md, "
                                      "Processes and layers)")
    unused = [f"{layer} -> {use}" for layer, uses in allowed.items() for use in sorted(uses or ())
              if (layer, use) not in used]
    return violations, unused, checked


class IncludeLayeringTest(unittest.TestCase):

    def test_every_include_is_allowed_and_every_allowance_used(self):
        with open(DESIGN, encoding="utf-8") as f:
            patterns, allowed = parse_table(f.read())
        violations, unused, checked = check(patterns, allowed)
        self.assertGreater(checked, 100, "too few project includes found: wrong SOURCE_DIR?")
        report = []
        if violations:
            report += ["includes the layer table forbids:"] + violations
        if unused:
            report += ["allowances of the layer table that no include uses (drop them from "
                       "docs/design.md):"] + unused
        if report:
            self.fail("\n".join(report))

    def test_table_parsing_and_most_specific_match(self):
        patterns, allowed = parse_table(
            "text\n| Layer | Files | May include |\n|---|---|---|\n"
            "| `low` | `low/` | — |\n"
            "| `low-client` | `low/client*`, `low/wire.h` | `low`, `proto` |\n"
            "| `proto` | `proto/`, `kvserve/` (generated) | — |\n"
            "| `top` | `top/` | `*` (any) |\n\nmore text\n", "table")
        self.assertEqual(layer_of("low/pool.h", patterns), "low")
        self.assertEqual(layer_of("low/client.cc", patterns), "low-client")
        self.assertEqual(layer_of("low/client_test.cc", patterns), "low-client")
        self.assertEqual(layer_of("low/wire.h", patterns), "low-client")
        self.assertEqual(layer_of("kvserve/v1/x.pb.h", patterns), "proto")
        self.assertIsNone(layer_of("absl/status/status.h", patterns))
        self.assertEqual(allowed["low"], set())
        self.assertEqual(allowed["low-client"], {"low", "proto"})
        self.assertIsNone(allowed["top"])
        with self.assertRaises(ValueError):  # an unknown layer
            parse_table("| layer | files | may include |\n|---|---|---|\n| `a` | `a/` | `b` |\n")
        with self.assertRaises(ValueError):  # no table
            parse_table("| folder | what |\n|---|---|\n")


if __name__ == "__main__":
    unittest.main()
