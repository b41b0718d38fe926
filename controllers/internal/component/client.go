package component

import (
	"errors"
	"fmt"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// NewClient returns a clientset for restConfig that identifies itself as userAgent and is
// rate-limited to qps with burst. restConfig is copied, not changed.
func NewClient(restConfig *rest.Config, userAgent string, qps float32, burst int) (kubernetes.Interface, error) {
	cfg, err := ClientConfig(restConfig, userAgent, qps, burst)
	if err != nil {
		return nil, err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("client %s: %w", userAgent, err)
	}
	return client, nil
}

// ClientConfig returns a copy of restConfig that identifies itself as userAgent and is
// rate-limited to qps with burst, for clients other than the clientset (metadata, discovery).
func ClientConfig(restConfig *rest.Config, userAgent string, qps float32, burst int) (*rest.Config, error) {
	if restConfig == nil {
		return nil, errors.New("component: nil rest config")
	}
	cfg := rest.CopyConfig(restConfig)
	cfg = rest.AddUserAgent(cfg, userAgent)
	cfg.QPS = qps
	cfg.Burst = burst
	// A caller-provided limiter would ignore QPS/Burst and be shared between clients.
	cfg.RateLimiter = nil
	return cfg, nil
}
