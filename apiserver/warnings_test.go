package apiserver

import (
	"fmt"
	"net/http"
	"sync"
	"testing"
)

// TestHeaderWarnings: each warning becomes one header, once, also when several webhooks of
// one write add theirs at the same time (run with -race); an empty one is dropped.
func TestHeaderWarnings(t *testing.T) {
	h := http.Header{}
	w := &headerWarnings{h: h}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			w.AddWarning("", fmt.Sprintf("hook %d says so", i%4))
			w.AddWarning("", "")
		})
	}
	wg.Wait()
	got := h.Values("Warning")
	if len(got) != 4 {
		t.Fatalf("headers %q, want 4", got)
	}
	for _, v := range got {
		if len(v) < len(`299 - "hook 0 says so"`) || v[:7] != `299 - "` {
			t.Errorf("header %q", v)
		}
	}
}
