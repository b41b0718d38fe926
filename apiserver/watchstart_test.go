package apiserver_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
)

// TestReadsAtReturnedRVStartQuickly does what kubectl get -w does, for every resource
// that can be listed and watched: right after writes to another resource, it lists in
// pages (which etcd answers, at its latest revision, newer than this resource's watch
// cache has seen), then watches from the list's resourceVersion. It also reads at that
// resourceVersion (a list not older than it, a get not older than it) and makes a
// consistent list. Every one must succeed, and the watch must then see the next change of
// the resource. Succeeding is what proves the cache asked etcd for progress: had it waited
// for etcd's unsolicited report (every 5 s, store/embed.go), the server would have given up
// after 3 s with "Too large resource version". How long the starts took is logged, not
// judged: timing belongs to benchmarks.
func TestReadsAtReturnedRVStartQuickly(t *testing.T) {
	t.Parallel()
	env := newEnv(t)
	ctx := testCtx(t)
	dyn, err := dynamic.NewForConfig(env.AdminConfig)
	check(t, err)
	resources := listableResources(t, env.Client.Discovery())
	if len(resources) < 7 {
		t.Fatalf("discovery lists only %d watchable resources: %v", len(resources), resources)
	}

	var starts []time.Duration
	for _, gvr := range resources {
		// Names of what is written elsewhere: events are served in two groups.
		qualified := strings.TrimSuffix(gvr.Resource+"."+gvr.Group, ".")
		t.Run(gvr.Resource+"."+gvr.Group, func(t *testing.T) {
			client := dyn.Resource(gvr)
			for i := 0; i < 3; i++ {
				writeElsewhere(t, ctx, env.Client, gvr, fmt.Sprintf("%s-%d", qualified, i))

				list, err := client.List(ctx, metav1.ListOptions{Limit: 500})
				check(t, err)
				rv := list.GetResourceVersion()

				begin := time.Now()
				w, err := client.Watch(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true})
				took := time.Since(begin)
				if err != nil {
					t.Fatalf("watch from the list's resourceVersion %s, after %v: %v", rv, took, err)
				}
				w.Stop()
				starts = append(starts, took)

				writeElsewhere(t, ctx, env.Client, gvr, fmt.Sprintf("%s-%d-again", qualified, i))
				for _, read := range []struct {
					name string
					do   func() error
				}{
					{"list not older than the returned resourceVersion", func() error {
						_, err := client.List(ctx, metav1.ListOptions{ResourceVersion: rv})
						return err
					}},
					{"consistent list", func() error {
						_, err := client.List(ctx, metav1.ListOptions{})
						return err
					}},
				} {
					begin := time.Now()
					if err := read.do(); err != nil {
						t.Fatalf("%s after %v: %v", read.name, time.Since(begin), err)
					}
				}
			}
		})
	}
	slices.Sort(starts)
	if len(starts) > 0 {
		t.Logf("watch start after writes elsewhere, %d watches: median %v, max %v", len(starts), starts[len(starts)/2], starts[len(starts)-1])
	}

	// The watch then follows the resource: a pod watched from a page's resourceVersion
	// sees the pod created next, and a get not older than that resourceVersion finds it.
	pods := env.Client.CoreV1().Pods("default")
	writeElsewhere(t, ctx, env.Client, schema.GroupVersionResource{Version: "v1", Resource: "pods"}, "follow")
	page, err := pods.List(ctx, metav1.ListOptions{Limit: 500})
	check(t, err)
	w, err := pods.Watch(ctx, metav1.ListOptions{ResourceVersion: page.ResourceVersion})
	check(t, err)
	defer w.Stop()
	created, err := pods.Create(ctx, podOn("default", "follow", ""), metav1.CreateOptions{})
	check(t, err)
	expectWatch(t, w, watch.Added, "follow")
	writeElsewhere(t, ctx, env.Client, schema.GroupVersionResource{Version: "v1", Resource: "pods"}, "follow-get")
	begin := time.Now()
	got, err := pods.Get(ctx, "follow", metav1.GetOptions{ResourceVersion: created.ResourceVersion})
	check(t, err)
	if got.UID != created.UID {
		t.Errorf("get not older than the create's resourceVersion: UID %v after %v, want %v", got.UID, time.Since(begin), created.UID)
	}
}

// listableResources returns every top-level resource discovery says can be listed and
// watched.
func listableResources(t *testing.T, disc discovery.DiscoveryInterface) []schema.GroupVersionResource {
	t.Helper()
	lists, err := disc.ServerPreferredResources()
	check(t, err)
	var out []schema.GroupVersionResource
	for _, l := range lists {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		check(t, err)
		for _, r := range l.APIResources {
			if slices.Contains(r.Verbs, "list") && slices.Contains(r.Verbs, "watch") && !strings.Contains(r.Name, "/") {
				out = append(out, gv.WithResource(r.Name))
			}
		}
	}
	return out
}

// writeElsewhere changes a resource other than gvr, so that the store's revision moves on
// while gvr's watch cache sees nothing.
func writeElsewhere(t *testing.T, ctx context.Context, c kubernetes.Interface, gvr schema.GroupVersionResource, name string) {
	t.Helper()
	var err error
	if gvr.Group == "coordination.k8s.io" && gvr.Resource == "leases" {
		ev := &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{Name: "elsewhere-" + name},
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: "default", Name: name},
			Reason:         "Tested",
			Message:        "a write elsewhere",
			Type:           corev1.EventTypeNormal,
		}
		_, err = c.CoreV1().Events("default").Create(ctx, ev, metav1.CreateOptions{})
	} else {
		_, err = c.CoordinationV1().Leases("default").Create(ctx, lease("default", "elsewhere-"+name, name), metav1.CreateOptions{})
	}
	check(t, err)
}
