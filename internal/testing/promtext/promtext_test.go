package promtext

import "testing"

func TestParse(t *testing.T) {
	text := `# TYPE hostlease_reclaims_total counter
hostlease_reclaims_total{network="a",reason="netns_gone"} 4
# TYPE hostlease_cri_up gauge
hostlease_cri_up 1
# TYPE hostlease_sweep_duration_seconds histogram
hostlease_sweep_duration_seconds_bucket{le="0.01"} 2
hostlease_sweep_duration_seconds_bucket{le="+Inf"} 3
hostlease_sweep_duration_seconds_sum 0.5
hostlease_sweep_duration_seconds_count 3
`
	got, err := Parse(text)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{
		"hostlease_reclaims_total/a/netns_gone": 4, "hostlease_cri_up//": 1,
		"hostlease_sweep_duration_seconds_sum//": 0.5, "hostlease_sweep_duration_seconds_count//": 3,
	}
	for _, s := range got {
		k := s.Name + "/" + s.Labels["network"] + "/" + s.Labels["reason"]
		if v, ok := want[k]; ok {
			if v != s.Value {
				t.Errorf("%s = %v, want %v", k, s.Value, v)
			}
			delete(want, k)
		}
	}
	if len(want) > 0 {
		t.Errorf("missing samples: %v", want)
	}
	if _, err := Parse("not a metric line {"); err == nil {
		t.Error("garbage parsed without error")
	}
}
