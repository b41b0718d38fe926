package apiserver

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiresource "k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"
	resourcehelper "k8s.io/component-helpers/resource"

	"github.com/miniplane/miniplane/store"
)

// ResourceQuota is enforced the way kube-apiserver's quota admission does it: before an
// object is stored, every quota of its namespace that tracks what the object uses is
// charged in a compare-and-swap of the quota's status.used, and the create is refused if
// a charge would exceed status.hard. Since each charge is a CAS on the quota object,
// concurrent creates (also through several API servers) never overshoot it.
//
// What kube-controller-manager's quota controller does — recount usage from the objects
// that exist, so that deletions and refused creates give their share back — the API
// server does itself, from its watch caches (quotaTracker), so quotas work without a
// controller-manager. A recount may only lower usage once the quota has had no charge
// for quotaSettle: a create charged a moment ago may not yet be in the caches, and
// recounting without it would hand its share out twice.

// quotaSettle is how long a quota must go without a charge before a recount may lower
// its usage: far longer than the time between a charge and the write it was for.
const quotaSettle = 2 * time.Second

var quotasResource = corev1.Resource("resourcequotas")

// quotaUsage is what obj, an object of res, counts against quotas.
func quotaUsage(res *resource, obj runtime.Object) corev1.ResourceList {
	count := "count/" + res.name
	if res.group != "" {
		count += "." + res.group
	}
	one := apiresource.MustParse("1")
	usage := corev1.ResourceList{corev1.ResourceName(count): one}
	if res.group != "" {
		return usage
	}
	switch o := obj.(type) {
	case *corev1.Pod:
		if o.Status.Phase == corev1.PodFailed || o.Status.Phase == corev1.PodSucceeded {
			return usage // a finished pod holds nothing
		}
		usage[corev1.ResourcePods] = one
		requests := resourcehelper.PodRequests(o, resourcehelper.PodResourcesOptions{})
		limits := resourcehelper.PodLimits(o, resourcehelper.PodResourcesOptions{})
		for name, q := range requests {
			usage[corev1.ResourceName("requests."+string(name))] = q
			if name == corev1.ResourceCPU || name == corev1.ResourceMemory || name == corev1.ResourceEphemeralStorage {
				usage[name] = q
			}
		}
		for name, q := range limits {
			usage[corev1.ResourceName("limits."+string(name))] = q
		}
	case *corev1.Service:
		usage[corev1.ResourceServices] = one
		if o.Spec.Type == corev1.ServiceTypeLoadBalancer {
			usage[corev1.ResourceServicesLoadBalancers] = one
		}
		if usesNodePorts(o) {
			usage[corev1.ResourceServicesNodePorts] = *apiresource.NewQuantity(int64(len(o.Spec.Ports)), apiresource.DecimalSI)
		}
	case *corev1.ConfigMap:
		usage[corev1.ResourceConfigMaps] = one
	case *corev1.Secret:
		usage[corev1.ResourceSecrets] = one
	case *corev1.ResourceQuota:
		usage[corev1.ResourceQuotas] = one
	case *corev1.ReplicationController:
		usage[corev1.ResourceReplicationControllers] = one
	case *corev1.PersistentVolumeClaim:
		// As upstream's claim evaluator: the claim and its requested storage, overall and
		// per storage class.
		usage[corev1.ResourcePersistentVolumeClaims] = one
		size, sized := o.Spec.Resources.Requests[corev1.ResourceStorage]
		if sized {
			usage[corev1.ResourceRequestsStorage] = size
		}
		if class := o.Spec.StorageClassName; class != nil && *class != "" {
			prefix := *class + ".storageclass.storage.k8s.io/"
			usage[corev1.ResourceName(prefix+string(corev1.ResourcePersistentVolumeClaims))] = one
			if sized {
				usage[corev1.ResourceName(prefix+string(corev1.ResourceRequestsStorage))] = size
			}
		}
	}
	return usage
}

// quotaMatches reports whether quota q covers obj: a quota with scopes covers only the
// pods in its scopes.
func quotaMatches(q *corev1.ResourceQuota, obj runtime.Object) bool {
	scoped := len(q.Spec.Scopes) > 0 || (q.Spec.ScopeSelector != nil && len(q.Spec.ScopeSelector.MatchExpressions) > 0)
	if !scoped {
		return true
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return false
	}
	for _, s := range q.Spec.Scopes {
		if !podInScope(pod, corev1.ScopedResourceSelectorRequirement{ScopeName: s, Operator: corev1.ScopeSelectorOpExists}) {
			return false
		}
	}
	if q.Spec.ScopeSelector != nil {
		for _, req := range q.Spec.ScopeSelector.MatchExpressions {
			if !podInScope(pod, req) {
				return false
			}
		}
	}
	return true
}

func podInScope(pod *corev1.Pod, req corev1.ScopedResourceSelectorRequirement) bool {
	switch req.ScopeName {
	case corev1.ResourceQuotaScopeTerminating:
		return pod.Spec.ActiveDeadlineSeconds != nil && *pod.Spec.ActiveDeadlineSeconds >= 0
	case corev1.ResourceQuotaScopeNotTerminating:
		return pod.Spec.ActiveDeadlineSeconds == nil || *pod.Spec.ActiveDeadlineSeconds < 0
	case corev1.ResourceQuotaScopeBestEffort:
		return qosClass(pod) == corev1.PodQOSBestEffort
	case corev1.ResourceQuotaScopeNotBestEffort:
		return qosClass(pod) != corev1.PodQOSBestEffort
	case corev1.ResourceQuotaScopePriorityClass:
		switch req.Operator {
		case corev1.ScopeSelectorOpExists:
			return pod.Spec.PriorityClassName != ""
		case corev1.ScopeSelectorOpDoesNotExist:
			return pod.Spec.PriorityClassName == ""
		case corev1.ScopeSelectorOpIn:
			return slices.Contains(req.Values, pod.Spec.PriorityClassName)
		case corev1.ScopeSelectorOpNotIn:
			return !slices.Contains(req.Values, pod.Spec.PriorityClassName)
		}
	}
	return false
}

// computeResources are the pod resources a quota can require every container to state.
var computeResources = []corev1.ResourceName{"requests.cpu", "requests.memory", "limits.cpu", "limits.memory", corev1.ResourceCPU, corev1.ResourceMemory}

// admitQuota charges every quota of the namespace that covers a new object, or refuses it.
func admitQuota(s *Server, ctx context.Context, a *admission) error {
	if a.op != opCreate || !a.res.namespaced {
		return nil
	}
	// A quota this server created a moment ago must already be enforced.
	quotas, err := s.cachedOwn(ctx, quotasResource, a.namespace)
	if err != nil || len(quotas) == 0 {
		return err
	}
	usage := quotaUsage(a.res, a.obj)
	for _, obj := range quotas {
		q := obj.(*corev1.ResourceQuota)
		if !quotaMatches(q, a.obj) {
			continue
		}
		if err := s.quota.charge(ctx, a, q, usage); err != nil {
			return err
		}
	}
	return nil
}

// quotaTracker charges quotas and keeps their usage recounted.
type quotaTracker struct {
	s *Server
	*recountLoop

	mu sync.Mutex
	// lastCharge is when each quota (by key) was last charged by this server, or seen
	// changed by the watch cache.
	lastCharge map[string]time.Time
}

func newQuotaTracker(s *Server) *quotaTracker {
	t := &quotaTracker{s: s, lastCharge: map[string]time.Time{}}
	t.recountLoop = newRecountLoop("quota", s.log, t.recount)
	return t
}

// quotaChanged notes a change to a quota seen by the watch cache: a charge by any server.
func (t *quotaTracker) quotaChanged(key string) {
	t.mu.Lock()
	t.lastCharge[key] = t.s.clock.Now()
	t.mu.Unlock()
}

// charge adds usage to quota q (as far as q tracks it), or fails with upstream's
// "exceeded quota" Forbidden error.
func (t *quotaTracker) charge(ctx context.Context, a *admission, q *corev1.ResourceQuota, usage corev1.ResourceList) error {
	hard := q.Status.Hard
	if hard == nil {
		hard = q.Spec.Hard
	}
	var missing []string
	delta := corev1.ResourceList{}
	for name := range hard {
		if u, ok := usage[name]; ok {
			delta[name] = u
		} else if _, isPod := a.obj.(*corev1.Pod); isPod && slices.Contains(computeResources, name) {
			missing = append(missing, string(name))
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return a.forbidden(fmt.Errorf("failed quota: %s: must specify %s", q.Name, strings.Join(missing, ",")))
	}
	if len(delta) == 0 {
		return nil
	}
	res := t.s.reg.lookupGroupResource(quotasResource)
	key := res.key(t.s.cfg.EtcdPrefix, q.Namespace, q.Name)
	_, err := t.s.store.GuaranteedUpdate(ctx, key, func(cur runtime.Object) (runtime.Object, error) {
		quota := cur.(*corev1.ResourceQuota)
		if quota.Status.Hard == nil {
			quota.Status.Hard = quota.Spec.Hard.DeepCopy()
		}
		if quota.Status.Used == nil {
			quota.Status.Used = corev1.ResourceList{}
		}
		var exceeded []corev1.ResourceName
		next := quota.Status.Used.DeepCopy()
		for name, d := range delta {
			limit, tracked := quota.Status.Hard[name]
			if !tracked {
				continue
			}
			used := next[name]
			used.Add(d)
			next[name] = used
			if used.Cmp(limit) > 0 {
				exceeded = append(exceeded, name)
			}
		}
		if len(exceeded) > 0 {
			sort.Slice(exceeded, func(i, j int) bool { return exceeded[i] < exceeded[j] })
			var req, used, limited []string
			for _, name := range exceeded {
				d, u, l := delta[name], quota.Status.Used[name], quota.Status.Hard[name]
				req = append(req, fmt.Sprintf("%s=%s", name, d.String()))
				used = append(used, fmt.Sprintf("%s=%s", name, u.String()))
				limited = append(limited, fmt.Sprintf("%s=%s", name, l.String()))
			}
			return nil, a.forbidden(fmt.Errorf("exceeded quota: %s, requested: %s, used: %s, limited: %s",
				quota.Name, strings.Join(req, ","), strings.Join(used, ","), strings.Join(limited, ",")))
		}
		if a.dryRun {
			return nil, errDryRun{}
		}
		quota.Status.Used = next
		return quota, nil
	}, store.UpdateOptions{})
	var dr errDryRun
	if errors.As(err, &dr) {
		return nil
	}
	if errors.Is(err, store.ErrNotFound) {
		return nil // the quota went away meanwhile
	}
	if err == nil {
		t.quotaChanged(key)
	}
	return err
}

// usage counts what the objects of q's namespace use of what q tracks.
func (t *quotaTracker) usage(q *corev1.ResourceQuota, hard corev1.ResourceList) corev1.ResourceList {
	used := corev1.ResourceList{}
	for name := range hard {
		used[name] = apiresource.MustParse("0")
	}
	for _, res := range t.s.reg.resources() {
		if !res.namespaced || !quotaResourceCounts(res, hard) {
			continue
		}
		// A view counts its storage resource's objects, in its own form: its own watch cache
		// may not have started.
		from := res
		if res.view != nil {
			from = res.view.storage
		}
		items, _ := from.cache.list(&watchFilter{namespace: q.Namespace})
		for _, it := range items {
			// One decoding an object: a compacted one is decoded on every call.
			obj := it.object()
			if res.view != nil {
				obj = res.view.fromStorage(obj)
			}
			if !quotaMatches(q, obj) {
				continue
			}
			for name, u := range quotaUsage(res, obj) {
				if cur, ok := used[name]; ok {
					cur.Add(u)
					used[name] = cur
				}
			}
		}
	}
	return used
}

// quotaResourceCounts reports whether objects of res can count against any of hard.
func quotaResourceCounts(res *resource, hard corev1.ResourceList) bool {
	for name := range quotaUsageNames(res) {
		if _, ok := hard[name]; ok {
			return true
		}
	}
	return false
}

// quotaUsageNames are the quota resources objects of res may count against.
func quotaUsageNames(res *resource) map[corev1.ResourceName]bool {
	names := map[corev1.ResourceName]bool{}
	sample := res.newFunc()
	if _, ok := sample.(*corev1.Pod); ok {
		sample = &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: apiresource.MustParse("1"), corev1.ResourceMemory: apiresource.MustParse("1"), corev1.ResourceEphemeralStorage: apiresource.MustParse("1")},
			Limits:   corev1.ResourceList{corev1.ResourceCPU: apiresource.MustParse("1"), corev1.ResourceMemory: apiresource.MustParse("1"), corev1.ResourceEphemeralStorage: apiresource.MustParse("1")},
		}}}}}
	}
	if svc, ok := sample.(*corev1.Service); ok {
		svc.Spec.Type = corev1.ServiceTypeLoadBalancer
	}
	for name := range quotaUsage(res, sample) {
		names[name] = true
	}
	return names
}

// recount sets the usage of every quota in namespace to what its objects use, waiting
// for the quota to settle before lowering it.
func (t *quotaTracker) recount(ctx context.Context, namespace string) error {
	quotas := t.s.cached(quotasResource, namespace)
	res := t.s.reg.lookupGroupResource(quotasResource)
	for _, obj := range quotas {
		q := obj.(*corev1.ResourceQuota)
		key := res.key(t.s.cfg.EtcdPrefix, q.Namespace, q.Name)
		settleLeft := time.Duration(0)
		err := t.s.rewrite(ctx, key, func(cur runtime.Object) (runtime.Object, error) {
			quota := cur.(*corev1.ResourceQuota)
			hard := quota.Spec.Hard.DeepCopy()
			counted := t.usage(quota, hard)
			t.mu.Lock()
			since := t.s.clock.Since(t.lastCharge[key])
			t.mu.Unlock()
			next := corev1.ResourceList{}
			for name, c := range counted {
				old, had := quota.Status.Used[name]
				if had && c.Cmp(old) < 0 && since < quotaSettle {
					next[name] = old // too soon to lower: a charge may not be visible yet
					settleLeft = quotaSettle - since
					continue
				}
				next[name] = c
			}
			if quotaStatusEqual(quota.Status, corev1.ResourceQuotaStatus{Hard: hard, Used: next}) {
				return nil, errDryRun{}
			}
			quota.Status.Hard, quota.Status.Used = hard, next
			return quota, nil
		})
		if err != nil {
			return err
		}
		if settleLeft > 0 {
			time.AfterFunc(settleLeft+10*time.Millisecond, func() { t.changed(namespace) })
		}
	}
	return nil
}

func quotaStatusEqual(a, b corev1.ResourceQuotaStatus) bool {
	eq := func(x, y corev1.ResourceList) bool {
		if len(x) != len(y) {
			return false
		}
		for name, q := range x {
			if other, ok := y[name]; !ok || q.Cmp(other) != 0 {
				return false
			}
		}
		return true
	}
	return eq(a.Hard, b.Hard) && eq(a.Used, b.Used)
}

// quotaStrategy adds to the ResourceQuota rules the status the server keeps: hard as
// the spec says and used as counted, from the moment a quota exists.
type quotaStrategy struct {
	kindRules[*corev1.ResourceQuota]
	tracker *quotaTracker // nil in tests that serve no quotas
}

func (q quotaStrategy) prepareForCreate(obj runtime.Object, now time.Time) {
	q.kindRules.prepareForCreate(obj, now)
	quota := obj.(*corev1.ResourceQuota)
	quota.Status.Hard = quota.Spec.Hard.DeepCopy()
	if q.tracker != nil {
		quota.Status.Used = q.tracker.usage(quota, quota.Status.Hard)
	}
}

func (q quotaStrategy) prepareForUpdate(obj, old runtime.Object, now time.Time) {
	q.kindRules.prepareForUpdate(obj, old, now)
	quota := obj.(*corev1.ResourceQuota)
	quota.Status.Hard = quota.Spec.Hard.DeepCopy()
	used := corev1.ResourceList{}
	for name := range quota.Status.Hard {
		if u, ok := quota.Status.Used[name]; ok {
			used[name] = u
		} else {
			used[name] = apiresource.MustParse("0")
		}
	}
	quota.Status.Used = used
}
