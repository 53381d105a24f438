// Package promtext reads a Prometheus text exposition (what hostlease-gc serves
// on /metrics) into flat samples, with the Prometheus library's own parser, for
// the tests and benchmarks that scrape the daemon.
package promtext

import (
	"strconv"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Sample is one series' value. Histograms give the series Prometheus queries
// see: name_bucket{le=...}, name_sum and name_count.
type Sample struct {
	Name   string
	Labels map[string]string
	Value  float64
}

// Parse parses an exposition in the text format.
func Parse(text string) ([]Sample, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		return nil, err
	}
	var out []Sample
	for name, mf := range families {
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, lp := range m.GetLabel() {
				labels[lp.GetName()] = lp.GetValue()
			}
			add := func(n string, v float64, extra ...string) {
				l := labels
				if len(extra) == 2 {
					l = make(map[string]string, len(labels)+1)
					for k, v := range labels {
						l[k] = v
					}
					l[extra[0]] = extra[1]
				}
				out = append(out, Sample{Name: n, Labels: l, Value: v})
			}
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				add(name, m.GetCounter().GetValue())
			case dto.MetricType_GAUGE:
				add(name, m.GetGauge().GetValue())
			case dto.MetricType_HISTOGRAM:
				h := m.GetHistogram()
				for _, b := range h.GetBucket() {
					add(name+"_bucket", float64(b.GetCumulativeCount()), "le", strconv.FormatFloat(b.GetUpperBound(), 'g', -1, 64))
				}
				add(name+"_bucket", float64(h.GetSampleCount()), "le", "+Inf")
				add(name+"_sum", h.GetSampleSum())
				add(name+"_count", float64(h.GetSampleCount()))
			case dto.MetricType_SUMMARY:
				add(name+"_sum", m.GetSummary().GetSampleSum())
				add(name+"_count", float64(m.GetSummary().GetSampleCount()))
			default:
				add(name, m.GetUntyped().GetValue())
			}
		}
	}
	return out, nil
}
