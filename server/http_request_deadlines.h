// Closes HTTP connections that take too long to send a request (slowloris): the headers
// of each request, and then its body, must arrive within `limit` of the connection
// opening or the previous request ending. libmicrohttpd's own timeout
// (HttpDaemonOptions::idle_timeout) only notices silence, and a client that trickles a
// byte a second never is.
//
// The daemon's callbacks report each connection's progress; a sweeper thread shuts the
// socket of one whose headers or body are late (libmicrohttpd then sees the connection
// end and closes it). A request being answered (a generation under way, a stream) has
// no deadline here.
// Threading: every method is thread-safe. The destructor joins the sweeper; destroy it
// after the daemon (no callback may arrive later).
#ifndef KVSERVE_SERVER_HTTP_REQUEST_DEADLINES_H_
#define KVSERVE_SERVER_HTTP_REQUEST_DEADLINES_H_

#include <condition_variable>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "absl/base/thread_annotations.h"
#include "absl/time/time.h"

struct MHD_Connection;

namespace kvserve::server {

class HttpRequestDeadlines {
 public:
  // `limit` >= 1 s; the sweeper looks every `limit` / 4 (at most every second).
  explicit HttpRequestDeadlines(absl::Duration limit);
  ~HttpRequestDeadlines();
  HttpRequestDeadlines(const HttpRequestDeadlines&) = delete;
  HttpRequestDeadlines& operator=(const HttpRequestDeadlines&) = delete;

  // A connection opened on socket `fd`: its first request's headers are due.
  void Opened(MHD_Connection* connection, int fd);
  // The headers of a request arrived: its body is due (the first handler call).
  void HeadersArrived(MHD_Connection* connection);
  // The whole request arrived: it is being answered (the handler's last call).
  void BodyArrived(MHD_Connection* connection);
  // The request ended: the next one's headers are due.
  void RequestEnded(MHD_Connection* connection);
  // The connection closed (before libmicrohttpd closes its socket).
  void Closed(MHD_Connection* connection);
  // Connections shut for a late request so far.
  int64_t shut() const;

 private:
  struct Progress {
    int fd = -1;
    absl::Time since;        // when the current wait began
    bool answering = false;  // the request is whole: no deadline
    bool shut = false;
  };
  void Sweep();

  const absl::Duration limit_;
  mutable std::mutex mu_;
  std::condition_variable stop_cv_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::unordered_map<MHD_Connection*, Progress> connections_ ABSL_GUARDED_BY(mu_);
  int64_t shut_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread sweeper_;  // last: started once the rest is built
};

}  // namespace kvserve::server

#endif  // KVSERVE_SERVER_HTTP_REQUEST_DEADLINES_H_
