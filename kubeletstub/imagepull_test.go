package kubeletstub

import (
	"strings"
	"testing"
	"time"

	"github.com/miniplane/miniplane/configs"
)

func TestImagePatterns(t *testing.T) {
	defaults, err := parseImagePatterns(configs.DefaultStubImagePullFailures())
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		image string
		// entries is nil for the defaults.
		entries []string
		fails   bool
	}{
		{image: "foo:non-existent", fails: true},
		{image: "gcr.io/google_samples/gb-redisslave:nonexistent", fails: true},
		{image: "registry.invalid/fault-agent:1", fails: true},
		{image: "reg.svc.invalid:5000/team/app@sha256:" + strings.Repeat("a", 64), fails: true},
		{image: "invalid.registry.k8s.io/invalid/alpine:3.1", fails: true},
		{image: "registry.k8s.io/e2e-test-images/httpd:2.4.38-4"},
		{image: "registry.example/fault-agent:1"},
		{image: "busybox"},
		{image: "invalid/alpine:3.1"}, // docker.io/invalid/alpine: a repository, not a registry
		{image: "busybox", entries: []string{"busybox"}, fails: true},
		{image: "docker.io/library/busybox:1.36", entries: []string{"busybox"}, fails: true},
		{image: "busybox:1.37", entries: []string{"busybox:1.36"}},
		{image: "busybox:1.36", entries: []string{"busybox:1.36"}, fails: true},
		{image: "localhost:5000/x:1", entries: []string{"localhost:5000/"}, fails: true},
		{image: "localhost:5000/x:1", entries: []string{"localhost/"}, fails: true},
		{image: "localhost:5001/x:1", entries: []string{"localhost:5000/"}},
		{image: "anything/at:all", entries: []string{"*"}, fails: true},
		{image: "foo:non-existent", entries: []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.image+"/"+strings.Join(tt.entries, ","), func(t *testing.T) {
			pp := pullPolicy{cluster: defaults}
			if tt.entries != nil {
				var err error
				if pp.cluster, err = parseImagePatterns(tt.entries); err != nil {
					t.Fatal(err)
				}
			}
			img := parseImage(tt.image)
			if img.invalid != nil {
				t.Fatalf("parseImage(%q): %v", tt.image, img.invalid)
			}
			why := pp.failure(img)
			if (why != "") != tt.fails {
				t.Errorf("failure(%q) = %q, want failing %v", tt.image, why, tt.fails)
			}
		})
	}
	// The node annotation adds to the configuration and says which one matched.
	node, err := parseImageAnnotation(" :v2 , registry.example/ ")
	if err != nil {
		t.Fatal(err)
	}
	pp := pullPolicy{cluster: defaults, node: node}
	if why := pp.failure(parseImage("registry.example/app:1")); !strings.Contains(why, AnnotationImagePullFailures) {
		t.Errorf("annotation entry: %q", why)
	}
	if why := pp.failure(parseImage("foo:non-existent")); !strings.Contains(why, "image-pull-failures of the stub configuration") {
		t.Errorf("configured entry: %q", why)
	}
	for _, bad := range []string{"", ":", "a b", "*/x", ".", "/", "UPPER:case"} {
		if _, err := parseImagePatterns([]string{bad}); err == nil {
			t.Errorf("entry %q accepted", bad)
		}
	}
}

// TestPullSchedule: ErrImagePull right after each attempt, ImagePullBackOff until the next;
// attempts 10s, 20s, 40s … apart, at most 5 minutes.
func TestPullSchedule(t *testing.T) {
	img := parseImage("foo:non-existent")
	tests := []struct {
		at     time.Duration
		reason string
		next   time.Duration
	}{
		{0, reasonErrImagePull, 5 * time.Second},
		{4 * time.Second, reasonErrImagePull, 5 * time.Second},
		{5 * time.Second, reasonImagePullBackOff, 10 * time.Second},
		{10 * time.Second, reasonErrImagePull, 15 * time.Second},
		{15 * time.Second, reasonImagePullBackOff, 30 * time.Second},
		{30 * time.Second, reasonErrImagePull, 35 * time.Second},
		{69 * time.Second, reasonImagePullBackOff, 70 * time.Second},
		{150 * time.Second, reasonErrImagePull, 155 * time.Second},
		{200 * time.Second, reasonImagePullBackOff, 310 * time.Second}, // 160s after the attempt at 150s
		{310 * time.Second, reasonErrImagePull, 315 * time.Second},
		{400 * time.Second, reasonImagePullBackOff, 610 * time.Second}, // capped at 5 minutes
		{10*time.Hour + 310*time.Second, reasonErrImagePull, 10*time.Hour + 315*time.Second},
	}
	for _, tt := range tests {
		st, next := pullWaiting(img, "why", t0, t0.Add(tt.at))
		if st.Reason != tt.reason || !next.Equal(t0.Add(tt.next)) {
			t.Errorf("at t0+%s: %s until t0+%s, want %s until t0+%s", tt.at, st.Reason, next.Sub(t0), tt.reason, tt.next)
		}
		if !strings.Contains(st.Message, `"foo:non-existent"`) || !strings.Contains(st.Message, "why") {
			t.Errorf("at t0+%s: message %q", tt.at, st.Message)
		}
	}
	bad := parseImage("Not An Image")
	if st, next := pullWaiting(bad, "", t0, t0.Add(time.Hour)); st.Reason != reasonInvalidImageName || !next.IsZero() {
		t.Errorf("invalid image: %s, next %v", st.Reason, next)
	}
}
