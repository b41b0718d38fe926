// Command report prints the specs of a ginkgo JUnit report as a pass/fail table, for
// test/conformance/run.sh. It exits 1 when a spec failed, 2 when the report cannot be read.
//
//	go run ./test/conformance/report junit.xml
package main

import (
	"encoding/xml"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
)

// junitReport is the part of ginkgo's JUnit report the table needs.
type junitReport struct {
	Suites []struct {
		Cases []junitCase `xml:"testcase"`
	} `xml:"testsuite"`
}

type junitCase struct {
	Name    string `xml:"name,attr"`
	Status  string `xml:"status,attr"`
	Time    string `xml:"time,attr"`
	Failure *struct {
		Message string `xml:"message,attr"`
		Text    string `xml:",chardata"`
	} `xml:"failure"`
	Error *struct {
		Message string `xml:"message,attr"`
	} `xml:"error"`
	Skipped *struct {
		Message string `xml:"message,attr"`
	} `xml:"skipped"`
}

// spec is one row of the table.
type spec struct {
	name, result, seconds, reason string
}

// summary is what the table shows: the specs that ran or were skipped at run time (with a
// reason), the failures of suite-level nodes (setup and teardown), and how many specs the
// focus left out.
type summary struct {
	specs        []spec
	filtered     int
	passed       int
	failed       int
	skippedAtRun int
}

// filterSkip is the message ginkgo writes for specs that the focus or skip filtered out.
const filterSkip = "skipped"

func summarize(r junitReport) summary {
	var s summary
	for _, suite := range r.Suites {
		for _, c := range suite.Cases {
			name, isSpec := strings.CutPrefix(c.Name, "[It] ")
			name = trimLabels(name)
			row := spec{name: name, seconds: c.Time}
			if secs, err := strconv.ParseFloat(c.Time, 64); err == nil {
				row.seconds = strconv.FormatFloat(secs, 'f', 1, 64)
			}
			switch c.Status {
			case "passed":
				if !isSpec {
					continue // setup and teardown nodes that worked say nothing
				}
				row.result = "PASS"
				s.passed++
			case "skipped", "pending":
				if c.Skipped != nil && strings.TrimSpace(c.Skipped.Message) != filterSkip && isSpec {
					row.result = "SKIP"
					row.reason = strings.TrimPrefix(c.Skipped.Message, "skipped - ")
					s.skippedAtRun++
					break
				}
				s.filtered++
				continue
			default: // failed, panicked, interrupted, aborted, timedout
				row.result = "FAIL"
				switch {
				case c.Failure != nil && c.Failure.Message != "":
					row.reason = c.Failure.Message
				case c.Failure != nil:
					row.reason = c.Failure.Text
				case c.Error != nil:
					row.reason = c.Error.Message
				}
				if row.reason == "" {
					row.reason = c.Status
				}
				s.failed++
			}
			s.specs = append(s.specs, row)
		}
	}
	sort.SliceStable(s.specs, func(i, j int) bool { return s.specs[i].name < s.specs[j].name })
	return s
}

// trimLabels drops the list of labels ginkgo appends to a spec's name ("… [Serial]
// [sig-apps, Serial]") when every label in it is already in the name as "[label]".
func trimLabels(name string) string {
	i := strings.LastIndex(name, " [")
	if i < 0 || !strings.HasSuffix(name, "]") {
		return name
	}
	for _, l := range strings.Split(name[i+2:len(name)-1], ", ") {
		if !strings.Contains(name[:i], "["+l+"]") {
			return name
		}
	}
	return name[:i]
}

// firstLine keeps a reason short enough for a table row.
func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > 160 {
		s = s[:157] + "..."
	}
	return s
}

func (s summary) print(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "RESULT\tSECONDS\tSPEC")
	for _, r := range s.specs {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", r.result, r.seconds, r.name)
		if r.reason != "" {
			fmt.Fprintf(tw, "\t\t  %s\n", firstLine(r.reason))
		}
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "\n%d passed, %d failed, %d skipped at run time (%d not selected)\n", s.passed, s.failed, s.skippedAtRun, s.filtered)
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: report JUNIT.xml")
		os.Exit(2)
	}
	data, err := os.ReadFile(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	var r junitReport
	if err := xml.Unmarshal(data, &r); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", os.Args[1], err)
		os.Exit(2)
	}
	s := summarize(r)
	s.print(os.Stdout)
	if s.failed > 0 {
		os.Exit(1)
	}
}
