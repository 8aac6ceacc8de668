// Happens-before edges for ThreadSanitizer that an uninstrumented library provides.
//
// Debian's gRPC, Abseil and protobuf are not built with -fsanitize=thread, so TSan
// cannot see the locks and atomics with which gRPC hands a call (its reactor, context
// and messages) from one thread to another: the thread that starts an operation
// (StartWrite, Finish, a stub call) and the gRPC thread that later runs its reaction
// (OnWriteDone, OnDone, the client's callback). We tell TSan about exactly those edges,
// at our own hand-off points:
//
//   TsanRelease(obj)  just before handing `obj` to gRPC (what this thread did before
//                     becomes visible to the thread gRPC hands it to),
//   TsanAcquire(obj)  first thing in the reaction gRPC runs for `obj`.
//
// A release merges into what earlier releases on the same address published, and an
// acquire takes all of it, so one address per call (the reactor) is enough. Annotate
// only edges gRPC's API guarantees (its documented ordering of reactions), never to
// silence a report: anything our own threads share outside such an edge (the engine's
// step thread, the writer executor) must still synchronise by itself, and TSan keeps
// checking that.
//
// Without -fsanitize=thread both functions are empty inline functions.
#ifndef KVSERVE_COMMON_TSAN_ANNOTATIONS_H_
#define KVSERVE_COMMON_TSAN_ANNOTATIONS_H_

#if defined(__SANITIZE_THREAD__)
#define KVSERVE_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define KVSERVE_TSAN 1
#endif
#endif

#ifdef KVSERVE_TSAN
#include <sanitizer/tsan_interface.h>
#endif

namespace kvserve::common {

// Publishes everything this thread did so far to the next TsanAcquire(handoff).
inline void TsanRelease(const void* handoff) {
#ifdef KVSERVE_TSAN
  __tsan_release(const_cast<void*>(handoff));
#else
  (void)handoff;
#endif
}

// Makes everything published by TsanRelease(handoff) visible to this thread.
inline void TsanAcquire(const void* handoff) {
#ifdef KVSERVE_TSAN
  __tsan_acquire(const_cast<void*>(handoff));
#else
  (void)handoff;
#endif
}

}  // namespace kvserve::common

#endif  // KVSERVE_COMMON_TSAN_ANNOTATIONS_H_
