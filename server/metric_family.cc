#include "server/metric_family.h"

#include <utility>

namespace kvserve::server {

prometheus::MetricFamily MakeFamily(std::string name, std::string help,
                                    prometheus::MetricType type) {
  prometheus::MetricFamily family;
  family.name = std::move(name);
  family.help = std::move(help);
  family.type = type;
  return family;
}

void AddSample(prometheus::MetricFamily& family, double value,
               std::vector<prometheus::ClientMetric::Label> labels) {
  prometheus::ClientMetric metric;
  metric.label = std::move(labels);
  if (family.type == prometheus::MetricType::Counter) {
    metric.counter.value = value;
  } else {
    metric.gauge.value = value;
  }
  family.metric.push_back(std::move(metric));
}

prometheus::MetricFamily SingleValueFamily(std::string name, std::string help,
                                           prometheus::MetricType type, double value) {
  prometheus::MetricFamily family = MakeFamily(std::move(name), std::move(help), type);
  AddSample(family, value);
  return family;
}

}  // namespace kvserve::server
