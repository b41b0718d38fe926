package placement

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
)

// AffinityMatcher is MatchesNodeSelectorAndAffinity with the pod's node selector and required
// affinity parsed once, for callers that test one pod against every node of a large cluster
// (the DaemonSet controller evaluates its template against each node on every sync).
type AffinityMatcher struct {
	required nodeaffinity.RequiredNodeAffinity
}

// NewAffinityMatcher prepares pod's spec.nodeSelector and required node affinity for
// repeated matching. pod is not retained beyond its selector terms; do not mutate them.
func NewAffinityMatcher(pod *corev1.Pod) AffinityMatcher {
	return AffinityMatcher{required: nodeaffinity.GetRequiredNodeAffinity(pod)}
}

// Matches reports whether node satisfies the pod's selector and required affinity, with the
// same answer as MatchesNodeSelectorAndAffinity (a malformed affinity matches nothing).
func (m AffinityMatcher) Matches(node *corev1.Node) bool {
	ok, err := m.required.Match(node)
	return err == nil && ok
}
