package apiserver

import (
	"net/http"
	"sync"

	utilnet "k8s.io/apimachinery/pkg/util/net"
)

// headerWarnings is the request's warning.Recorder: each warning an admission plugin (or a
// webhook's response) adds becomes one `Warning: 299 - "..."` header, once, as
// kube-apiserver sends them. Added before the response is written, as admission runs first;
// the validating webhooks of one write are called in parallel, hence the lock.
type headerWarnings struct {
	mu   sync.Mutex
	h    http.Header
	seen map[string]bool
}

func (w *headerWarnings) AddWarning(_, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if text == "" || w.seen[text] {
		return
	}
	h, err := utilnet.NewWarningHeader(299, "-", text)
	if err != nil {
		return // as kube-apiserver drops a warning it cannot send
	}
	if w.seen == nil {
		w.seen = map[string]bool{}
	}
	w.seen[text] = true
	w.h.Add("Warning", h)
}
