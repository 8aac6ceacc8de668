// Metric families built at scrape time by hand, for the prometheus::Collectable collectors
// (engine stats in service::Metrics, store state in cachesvc::CacheMetrics, procfs in
// ProcessCollector): one way to make a family and its counter or gauge samples.
#ifndef KVSERVE_SERVER_METRIC_FAMILY_H_
#define KVSERVE_SERVER_METRIC_FAMILY_H_

#include <string>
#include <vector>

#include "prometheus/client_metric.h"
#include "prometheus/metric_family.h"
#include "prometheus/metric_type.h"

namespace kvserve::server {

// An empty family. `type` must be Counter or Gauge (AddSample writes only those).
prometheus::MetricFamily MakeFamily(std::string name, std::string help,
                                    prometheus::MetricType type);

// Appends one sample with `labels`: the counter value for a Counter family, else the gauge.
void AddSample(prometheus::MetricFamily& family, double value,
               std::vector<prometheus::ClientMetric::Label> labels = {});

// A family holding one unlabelled sample.
prometheus::MetricFamily SingleValueFamily(std::string name, std::string help,
                                           prometheus::MetricType type, double value);

}  // namespace kvserve::server

#endif  // KVSERVE_SERVER_METRIC_FAMILY_H_
