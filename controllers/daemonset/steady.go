package daemonset

import (
	"reflect"
	"sync"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// A sync reads the DaemonSet, its ControllerRevisions, the pods of its controller-index
// buckets (its own and the namespace's orphans) and the nodes, and, when it is settled, the
// outcome depends on nothing else. steadyState remembers, per DaemonSet, the inputs of the
// last sync that ended settled, so that a sync whose inputs have not moved since (the
// re-sync that the DaemonSet's own status write causes, a wake-up that turns out early, a
// periodic resync) returns at once instead of walking every node and pod again
// (docs/daemonset-controller.md#steady-state).
//
// Inputs are versioned by counters that the informer handlers bump on every change they
// see, before any filtering that could hide a change from a sync: a pod event bumps the
// controller-index buckets of its old and new object, a ControllerRevision event its
// namespace, a node event (add, delete, or an update that can change a placement answer)
// one cluster-wide counter. The counters are read before the caches are, so a change that
// lands during a sync leaves the remembered versions behind and the next sync runs in full.
//
// A sync ends settled only when its result cannot change with the passing of time alone:
// no error, expectations satisfied, no delayed requeue armed (a pod turning available after
// minReadySeconds, a failed pod in backoff), and CURRENT mode (LEGACY-BIND's placement also
// reads other pods on each node, and records FailedPlacement events on every sync).
type steadyState struct {
	mu       sync.Mutex
	podGen   map[string]uint64 // by controller-index key: uid/<UID>, orphan/<namespace>
	histGen  map[string]uint64 // by namespace
	nodeGen  uint64
	settled  map[string]settledSync // by DaemonSet key
	disabled bool
}

// inputVersions are the counters one sync of one DaemonSet depends on.
type inputVersions struct {
	owned, orphans, history, nodes uint64
}

// settledSync is what a settled sync saw and concluded.
type settledSync struct {
	versions    inputVersions
	ds          *appsv1.DaemonSet // the cached object the sync read
	uid         types.UID
	generation  int64
	status      statusCounts
	collisions  *int32
	labels      map[string]string
	annotations map[string]string
}

func (s *steadyState) bumpPods(keys ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.podGen == nil {
		s.podGen = map[string]uint64{}
	}
	for _, k := range keys {
		s.podGen[k]++
	}
}

func (s *steadyState) bumpHistory(namespace string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.histGen == nil {
		s.histGen = map[string]uint64{}
	}
	s.histGen[namespace]++
}

func (s *steadyState) bumpNodes() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nodeGen++
}

// invalidate forgets every settled sync, as if every input had changed.
func (s *steadyState) invalidate() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.settled = nil
}

func (s *steadyState) forget(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.settled, key)
}

// versions reads the counters for ds; call it before reading any cache.
func (s *steadyState) versions(ds *appsv1.DaemonSet) inputVersions {
	s.mu.Lock()
	defer s.mu.Unlock()
	return inputVersions{
		owned:   s.podGen[controllerIndexKey(string(ds.UID))],
		orphans: s.podGen[orphanIndexKey(ds.Namespace)],
		history: s.histGen[ds.Namespace],
		nodes:   s.nodeGen,
	}
}

// unchanged reports whether a sync of ds with inputs v would repeat the last settled one:
// same inputs, same spec (generation), same metadata the sync reads, and a stored status
// that already says what that sync computed, so it would write nothing.
func (s *steadyState) unchanged(key string, ds *appsv1.DaemonSet, v inputVersions) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.disabled {
		return false
	}
	m, ok := s.settled[key]
	if !ok || m.versions != v || m.uid != ds.UID {
		return false
	}
	if m.ds == ds {
		return true
	}
	return ds.Generation == m.generation &&
		ds.DeletionTimestamp == nil &&
		ds.Status.ObservedGeneration >= ds.Generation &&
		statusEqual(ds.Status, m.status) &&
		reflect.DeepEqual(ds.Status.CollisionCount, m.collisions) &&
		reflect.DeepEqual(ds.Labels, m.labels) &&
		reflect.DeepEqual(ds.Annotations, m.annotations)
}

// remember records a settled sync of ds that read inputs v and computed st.
func (s *steadyState) remember(key string, ds *appsv1.DaemonSet, v inputVersions, st statusCounts) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.disabled {
		return
	}
	if s.settled == nil {
		s.settled = map[string]settledSync{}
	}
	s.settled[key] = settledSync{
		versions:    v,
		ds:          ds,
		uid:         ds.UID,
		generation:  ds.Generation,
		status:      st,
		collisions:  ds.Status.CollisionCount,
		labels:      ds.Labels,
		annotations: ds.Annotations,
	}
}

// podInputKeys are the controller-index buckets pod lives in, which are the inputs a pod
// event changes.
func podInputKeys(pod *corev1.Pod) []string {
	keys, _ := podControllerIndex(pod)
	return keys
}
