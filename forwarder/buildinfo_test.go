package forwarder

import (
	"runtime"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestBuildInfoMetric: New exports walpost_build_info 1 with the version
// and commit it was given and the Go version.
func TestBuildInfoMetric(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := New(testConfig(t), Deps{Registry: reg, Build: Build{Version: "v1.2.3", Commit: "feedface"}}); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "walpost_build_info" {
			continue
		}
		if len(mf.GetMetric()) != 1 {
			t.Fatalf("walpost_build_info has %d series, want 1", len(mf.GetMetric()))
		}
		m := mf.GetMetric()[0]
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		want := map[string]string{"version": "v1.2.3", "commit": "feedface", "goversion": runtime.Version()}
		if len(labels) != len(want) {
			t.Errorf("labels %v, want %v", labels, want)
		}
		for k, v := range want {
			if labels[k] != v {
				t.Errorf("label %s = %q, want %q", k, labels[k], v)
			}
		}
		if v := m.GetGauge().GetValue(); v != 1 {
			t.Errorf("walpost_build_info = %v, want 1", v)
		}
		return
	}
	t.Fatal("walpost_build_info is not registered")
}
