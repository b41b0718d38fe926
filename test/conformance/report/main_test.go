package main

import (
	"encoding/xml"
	"strings"
	"testing"
)

// sample has the shapes of ginkgo's JUnit report: suite nodes, a passed, a failed, a
// filtered and a run-time skipped spec.
const sample = `<?xml version="1.0" encoding="UTF-8"?>
<testsuites tests="5" failures="1">
  <testsuite name="Kubernetes e2e suite" tests="5">
    <testcase name="[SynchronizedBeforeSuite]" classname="Kubernetes e2e suite" status="passed" time="0.017213654"></testcase>
    <testcase name="[It] [sig-apps] Daemon set [Serial] should run and stop simple daemon [Conformance] [sig-apps, Serial, Conformance]" classname="Kubernetes e2e suite" status="passed" time="12.5"></testcase>
    <testcase name="[It] [sig-apps] Daemon set [Serial] should rollback without unnecessary restarts [Conformance]" classname="Kubernetes e2e suite" status="failed" time="301.2">
      <failure message="unexpected pod daemon-set-x be restarted&#xA;more detail" type="failed">stack</failure>
    </testcase>
    <testcase name="[It] [sig-storage] something" classname="Kubernetes e2e suite" status="skipped" time="0"><skipped message="skipped"></skipped></testcase>
    <testcase name="[It] [sig-apps] needs a provider" classname="Kubernetes e2e suite" status="skipped" time="0.2"><skipped message="skipped - Only supported for providers [gce]"></skipped></testcase>
    <testcase name="[SynchronizedAfterSuite]" classname="Kubernetes e2e suite" status="failed" time="1"><failure message="teardown broke"></failure></testcase>
  </testsuite>
</testsuites>`

func TestSummarize(t *testing.T) {
	var r junitReport
	if err := xml.Unmarshal([]byte(sample), &r); err != nil {
		t.Fatal(err)
	}
	s := summarize(r)
	if s.passed != 1 || s.failed != 2 || s.skippedAtRun != 1 || s.filtered != 1 {
		t.Errorf("counts = %d passed, %d failed, %d skipped, %d filtered; want 1, 2, 1, 1", s.passed, s.failed, s.skippedAtRun, s.filtered)
	}
	var out strings.Builder
	s.print(&out)
	table := out.String()
	for _, row := range []struct{ result, name string }{
		{"PASS", "[sig-apps] Daemon set [Serial] should run and stop simple daemon [Conformance]"},
		{"FAIL", "[sig-apps] Daemon set [Serial] should rollback without unnecessary restarts [Conformance]"},
		{"SKIP", "[sig-apps] needs a provider"},
		{"FAIL", "[SynchronizedAfterSuite]"},
	} {
		if !hasRow(table, row.result, row.name) {
			t.Errorf("table lacks %s %s:\n%s", row.result, row.name, table)
		}
	}
	if !strings.Contains(table, "PASS    12.5 ") {
		t.Errorf("seconds not shown with one decimal:\n%s", table)
	}
	for _, want := range []string{
		"  unexpected pod daemon-set-x be restarted\n",
		"  Only supported for providers [gce]\n",
		"1 passed, 2 failed, 1 skipped at run time (1 not selected)",
	} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
	if strings.Contains(table, "more detail") || strings.Contains(table, "sig-storage") {
		t.Errorf("table shows a filtered spec or a second failure line:\n%s", table)
	}
}

// hasRow reports whether table has a row with this result in the first column that ends with
// the spec's name.
func hasRow(table, result, name string) bool {
	for _, line := range strings.Split(table, "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == result && strings.HasSuffix(line, name) {
			return true
		}
	}
	return false
}

func TestTrimLabels(t *testing.T) {
	for in, want := range map[string]string{
		"[sig-apps] Daemon set should x [Serial] [sig-apps, Serial]": "[sig-apps] Daemon set should x [Serial]",
		"[sig-apps] Daemon set should x [Serial] [sig-apps]":         "[sig-apps] Daemon set should x [Serial]",
		"[sig-apps] Daemon set should x [Feature:Y]":                 "[sig-apps] Daemon set should x [Feature:Y]",
		"a spec without labels":                                      "a spec without labels",
	} {
		if got := trimLabels(in); got != want {
			t.Errorf("trimLabels(%q) = %q, want %q", in, got, want)
		}
	}
}
