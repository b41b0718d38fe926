package apiserver

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/miniplane/miniplane/store"
)

// deleteNamespace marks a namespace Terminating; the namespace finalizer then empties it
// and removes it, as kube-apiserver and the namespace controller do together.
func (c *call) deleteNamespace(opts *metav1.DeleteOptions) {
	for _, protected := range bootstrapNamespaces {
		if c.info.name == protected {
			c.fail(apierrors.NewForbidden(c.gr(), c.info.name, errors.New("this namespace may not be deleted")))
			return
		}
	}
	if len(opts.DryRun) > 0 {
		obj, err := c.s.store.Get(c.r.Context(), c.key("", c.info.name))
		if err != nil {
			c.fail(err)
			return
		}
		c.respond(http.StatusOK, obj, nil)
		return
	}
	out, err := c.s.store.GuaranteedUpdate(c.r.Context(), c.key("", c.info.name), func(cur runtime.Object) (runtime.Object, error) {
		ns := cur.(*corev1.Namespace)
		if p := opts.Preconditions; p != nil && p.UID != nil && *p.UID != ns.UID {
			return nil, apierrors.NewConflict(c.gr(), c.info.name,
				fmt.Errorf("Precondition failed: UID in precondition: %v, UID in object meta: %v", *p.UID, ns.UID))
		}
		if ns.DeletionTimestamp == nil {
			now := c.now()
			ns.DeletionTimestamp = &now
			zero := int64(0)
			ns.DeletionGracePeriodSeconds = &zero
		}
		ns.Finalizers = gcFinalizers(ns.Finalizers, opts)
		ns.Status.Phase = corev1.NamespaceTerminating
		if len(ns.Spec.Finalizers) == 0 {
			ns.Spec.Finalizers = []corev1.FinalizerName{corev1.FinalizerKubernetes}
		}
		return ns, nil
	}, store.UpdateOptions{})
	if err != nil {
		c.fail(err)
		return
	}
	c.s.nsFinal.trigger()
	c.respond(http.StatusOK, out, nil)
}

// namespaceFinalizer empties Terminating namespaces and then removes them. It is the
// part of kube-controller-manager's namespace controller that miniplane needs, kept in
// the API server because it must work even when no controller-manager runs.
type namespaceFinalizer struct {
	s     *Server
	kick  chan struct{}
	every time.Duration
	// emptySince is when each Terminating namespace was first seen empty; only run touches it.
	emptySince map[string]time.Time
}

// namespaceQuietPeriod is how long a Terminating namespace must stay empty before it is
// removed. A create that checked the namespace an instant before it turned Terminating may
// commit after the finalizer looked; looking again a little later catches it.
const namespaceQuietPeriod = 2 * time.Second

func newNamespaceFinalizer(s *Server) *namespaceFinalizer {
	return &namespaceFinalizer{s: s, kick: make(chan struct{}, 1), every: time.Second, emptySince: map[string]time.Time{}}
}

func (f *namespaceFinalizer) trigger() {
	select {
	case f.kick <- struct{}{}:
	default:
	}
}

func (f *namespaceFinalizer) run(ctx context.Context) {
	t := time.NewTicker(f.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-f.kick:
		case <-t.C:
		}
		nsRes := f.s.reg.lookup("", "v1", "namespaces")
		items, _ := nsRes.cache.list(&watchFilter{})
		for _, it := range items {
			ns := it.obj.(*corev1.Namespace)
			if ns.DeletionTimestamp == nil {
				continue
			}
			if err := f.finalize(ctx, ns.Name); err != nil {
				f.s.log.Warn("namespace finalization incomplete", "namespace", ns.Name, "err", err)
			}
		}
	}
}

// finalize deletes everything in the namespace; once nothing is left it drops the
// "kubernetes" finalizer and removes the namespace (unless other finalizers remain).
func (f *namespaceFinalizer) finalize(ctx context.Context, name string) error {
	zero := int64(0)
	background := metav1.DeletePropagationBackground
	opts := &metav1.DeleteOptions{GracePeriodSeconds: &zero, PropagationPolicy: &background}
	remaining := 0
	for _, res := range f.s.reg.all {
		if !res.namespaced {
			continue
		}
		// Each cache follows its own etcd watch and may not yet hold objects created
		// just before the namespace was deleted: catch up first, or "nothing left" could
		// be wrong and the namespace removed with content still in it.
		if err := res.cache.waitFresh(ctx); err != nil {
			return err
		}
		items, _ := res.cache.list(&watchFilter{namespace: name})
		remaining += len(items)
		for _, it := range items {
			if _, _, err := f.s.deleteObject(ctx, res, it.namespace, it.name, opts, nil); err != nil && !errors.Is(err, store.ErrNotFound) {
				return err
			}
		}
	}
	if remaining > 0 {
		delete(f.emptySince, name)
		return nil // the next round sees the deletions in the caches
	}
	since, seen := f.emptySince[name]
	if !seen {
		f.emptySince[name] = time.Now()
		return nil
	}
	if time.Since(since) < namespaceQuietPeriod {
		return nil
	}
	delete(f.emptySince, name)
	nsRes := f.s.reg.lookup("", "v1", "namespaces")
	_, err := f.s.store.GuaranteedUpdate(ctx, nsRes.key(f.s.cfg.EtcdPrefix, "", name), func(cur runtime.Object) (runtime.Object, error) {
		ns := cur.(*corev1.Namespace)
		ns.Spec.Finalizers = nil
		if len(ns.Finalizers) == 0 {
			return nil, nil
		}
		return ns, nil
	}, store.UpdateOptions{})
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	return err
}
