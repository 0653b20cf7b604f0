/** ListMetricDescriptors: the metrics ListPodSandboxMetrics reports, with their help and labels. */
import { ListMetricDescriptorsResponse } from '../gen/runtime/v1/api.js';
import { metricDescriptors } from '../stats/metrics.js';

export async function listMetricDescriptors(): Promise<ListMetricDescriptorsResponse> {
  return ListMetricDescriptorsResponse.fromPartial({ descriptors: metricDescriptors() });
}
