package apiserver

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"

	"github.com/miniplane/miniplane/apiserver/auth"
	"github.com/miniplane/miniplane/store"
)

// bootstrapNamespaces exist from the start, as in every Kubernetes cluster, and cannot be
// deleted.
var bootstrapNamespaces = []string{metav1.NamespaceDefault, metav1.NamespaceSystem, metav1.NamespacePublic, corev1.NamespaceNodeLease}

// namespaces is the namespaces resource, which namespace lifecycle code works on.
func (s *Server) namespaces() *resource { return s.reg.lookup("", "v1", "namespaces") }

// bootstrap creates the namespaces every cluster has.
func (s *Server) bootstrap(ctx context.Context) error {
	nsRes := s.namespaces()
	for _, name := range bootstrapNamespaces {
		now := s.clock.Now()
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
			Name: name, UID: uuid.NewUUID(), CreationTimestamp: metav1.NewTime(now),
			Labels: map[string]string{corev1.LabelMetadataName: name},
		}}
		nsRes.strategy.prepareForCreate(ns, now)
		_, err := s.store.Create(ctx, nsRes.key(s.cfg.EtcdPrefix, "", name), ns, 0)
		if err != nil && !errors.Is(err, store.ErrAlreadyExists) {
			return fmt.Errorf("bootstrap namespace %s: %w", name, err)
		}
	}
	return nil
}

// checkNamespaceOpen fails with 404 when the namespace does not exist and 403 when it is
// being deleted, as kube-apiserver's NamespaceLifecycle admission does.
func (s *Server) checkNamespaceOpen(ctx context.Context, namespace string, res *resource, name string) error {
	nsRes := s.namespaces()
	key := nsRes.key(s.cfg.EtcdPrefix, "", namespace)
	var ns *corev1.Namespace
	if co, ok := nsRes.cache.get(key); ok {
		ns = co.object().(*corev1.Namespace)
	} else {
		// The cache may not have seen a namespace created a moment ago.
		obj, err := s.store.Get(ctx, key)
		if errors.Is(err, store.ErrNotFound) {
			return apierrors.NewNotFound(corev1.Resource("namespaces"), namespace)
		}
		if err != nil {
			return err
		}
		ns = obj.(*corev1.Namespace)
	}
	if ns.DeletionTimestamp != nil || ns.Status.Phase == corev1.NamespaceTerminating {
		err := apierrors.NewForbidden(res.groupResource(), name,
			fmt.Errorf("unable to create new content in namespace %s because it is being terminated", namespace))
		err.ErrStatus.Details.Causes = append(err.ErrStatus.Details.Causes, metav1.StatusCause{
			Type: corev1.NamespaceTerminatingCause, Message: fmt.Sprintf("namespace %s is being terminated", namespace), Field: "metadata.namespace",
		})
		return err
	}
	return nil
}

// deleteNamespace is the namespaces' deleteFunc: it marks a namespace Terminating and
// leaves it there; the namespace finalizer then empties it and removes it, as
// kube-apiserver and the namespace controller do together. It never reports the
// namespace gone.
func (s *Server) deleteNamespace(ctx context.Context, res *resource, _, name string, opts *metav1.DeleteOptions,
	authorize func(runtime.Object) error) (runtime.Object, bool, error) {
	for _, protected := range bootstrapNamespaces {
		if name == protected {
			return nil, false, apierrors.NewForbidden(res.groupResource(), name, errors.New("this namespace may not be deleted"))
		}
	}
	key := res.key(s.cfg.EtcdPrefix, "", name)
	if len(opts.DryRun) > 0 {
		obj, err := s.store.Get(ctx, key)
		if err == nil && authorize != nil {
			err = authorize(obj)
		}
		return obj, false, err
	}
	out, err := s.store.GuaranteedUpdate(ctx, key, func(cur runtime.Object) (runtime.Object, error) {
		if authorize != nil {
			if err := authorize(cur); err != nil {
				return nil, err
			}
		}
		ns := cur.(*corev1.Namespace)
		if p := opts.Preconditions; p != nil && p.UID != nil && *p.UID != ns.UID {
			return nil, apierrors.NewConflict(res.groupResource(), name,
				fmt.Errorf("Precondition failed: UID in precondition: %v, UID in object meta: %v", *p.UID, ns.UID))
		}
		if ns.DeletionTimestamp == nil {
			now := metav1.NewTime(s.clock.Now().Truncate(time.Second))
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
		return nil, false, err
	}
	s.nsFinal.trigger()
	return out, false, nil
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
	// terminatingSince is when each namespace was first seen Terminating; only run touches it.
	terminatingSince map[string]time.Time
}

// namespaceContentDelay is how long a Terminating namespace keeps its content before the
// finalizer starts deleting it. kube-controller-manager's namespace controller takes about
// that long to get to a namespace; `kubectl delete -f` of a file that starts with its
// Namespace relies on it, deleting the file's other objects itself, and reports NotFound
// for every object already gone.
const namespaceContentDelay = time.Second

// namespaceQuietPeriod is how long a Terminating namespace must stay empty before it is
// removed. A create that checked the namespace an instant before it turned Terminating may
// commit after the finalizer looked; looking again a little later catches it.
const namespaceQuietPeriod = 2 * time.Second

func newNamespaceFinalizer(s *Server) *namespaceFinalizer {
	return &namespaceFinalizer{s: s, kick: make(chan struct{}, 1), every: 250 * time.Millisecond,
		emptySince: map[string]time.Time{}, terminatingSince: map[string]time.Time{}}
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
		items, _ := f.s.namespaces().cache.list(&watchFilter{})
		terminating := map[string]time.Time{}
		for _, it := range items {
			ns := it.object().(*corev1.Namespace)
			if ns.DeletionTimestamp == nil {
				continue
			}
			since, seen := f.terminatingSince[ns.Name]
			if !seen {
				since = f.s.clock.Now()
			}
			terminating[ns.Name] = since
			if f.s.clock.Since(since) < namespaceContentDelay {
				continue
			}
			if err := f.finalize(ctx, ns.Name); err != nil {
				f.s.log.Warn("namespace finalization incomplete", "namespace", ns.Name, "err", err)
			}
		}
		f.terminatingSince = terminating
	}
}

// namespaceControllerUser is who the namespace finalizer's deletes are sent to admission
// webhooks as: the ServiceAccount kube-controller-manager's namespace controller uses.
var namespaceControllerUser = &auth.User{
	Name:   serviceaccount.MakeUsername(metav1.NamespaceSystem, "namespace-controller"),
	Groups: append(serviceaccount.MakeGroupNames(metav1.NamespaceSystem), "system:authenticated"),
}

// finalize deletes everything in the namespace, pods first: while a pod remains (its
// kubelet has not stopped it, or a finalizer holds it) nothing else is deleted, so that
// what a pod still uses (its ConfigMaps, Secrets, ServiceAccount) outlives it, as the
// namespace controller's ordered deletion does. Each round records its progress in the
// namespace's status conditions. Once nothing is left it drops the "kubernetes" finalizer
// and removes the namespace (unless other finalizers remain).
func (f *namespaceFinalizer) finalize(ctx context.Context, name string) error {
	zero := int64(0)
	background := metav1.DeletePropagationBackground
	opts := &metav1.DeleteOptions{GracePeriodSeconds: &zero, PropagationPolicy: &background}
	pods := f.s.reg.lookup("", "v1", "pods")
	var others []*resource
	for _, res := range f.s.reg.resources() {
		// A view's objects are its storage resource's, deleted through that; a version of a
		// definition's objects are its storage version's, deleted through that without a
		// conversion.
		if res.namespaced && res != pods && res.view == nil && !res.convertedVersion() {
			others = append(others, res)
		}
	}
	totals := newContentTotals()
	present := 0 // objects found this round, gone or not
	// The deletes go to the admission webhooks as kube-controller-manager's namespace
	// controller sends them, through the API as its ServiceAccount: a webhook that refuses
	// one keeps the namespace Terminating, its condition saying why.
	asController := context.WithValue(ctx, stateKey{}, &requestState{user: namespaceControllerUser})
	// deleteAll deletes every object of res in the namespace and counts what stays.
	deleteAll := func(res *resource) error {
		// Each cache follows its own etcd watch and may not yet hold objects created
		// just before the namespace was deleted: catch up first, or "nothing left" could
		// be wrong and the namespace removed with content still in it.
		if err := res.cache.waitFresh(ctx); err != nil {
			return err
		}
		items, _ := res.cache.list(&watchFilter{namespace: name})
		present += len(items)
		admit := func(obj runtime.Object) error {
			m, _ := meta.Accessor(obj)
			return f.s.admitDelete(asController, res, obj, m.GetNamespace(), m.GetName(), false)
		}
		for _, it := range items {
			last, gone, err := f.s.deleteOne(ctx, res, it.namespace, it.name, opts, admit)
			if errors.Is(err, store.ErrNotFound) {
				continue
			}
			if err != nil {
				totals.errs = append(totals.errs, fmt.Sprintf("%s: %v", res.groupResource(), err))
				continue
			}
			if !gone {
				totals.remain(res.groupResource().String(), last)
			}
		}
		return nil
	}
	if pods != nil {
		if err := deleteAll(pods); err != nil {
			return err
		}
	}
	if len(totals.remaining) == 0 {
		for _, res := range others {
			if err := deleteAll(res); err != nil {
				return err
			}
		}
	}
	if err := f.updateConditions(ctx, name, totals); err != nil {
		return err
	}
	if present > 0 {
		delete(f.emptySince, name)
		return nil // the next round sees the deletions in the caches
	}
	// The quiet period is measured on the server clock, so tests stepping a fake clock
	// decide when an empty namespace goes; the loop's ticker only sets how often it looks.
	since, seen := f.emptySince[name]
	if !seen {
		f.emptySince[name] = f.s.clock.Now()
		return nil
	}
	if f.s.clock.Since(since) < namespaceQuietPeriod {
		return nil
	}
	delete(f.emptySince, name)
	_, err := f.s.store.GuaranteedUpdate(ctx, f.s.namespaces().key(f.s.cfg.EtcdPrefix, "", name), func(cur runtime.Object) (runtime.Object, error) {
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
