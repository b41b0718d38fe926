package apiserver

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/miniplane/miniplane/store"
)

// contentTotals is what one round of namespace finalization left behind: the objects still
// there (being deleted, held by finalizers or by their kubelet), by group resource and by
// finalizer, and the deletions that failed.
type contentTotals struct {
	remaining  map[string]int // "<resource>.<group>" → objects
	finalizers map[string]int // finalizer → objects holding it
	errs       []string
}

func newContentTotals() *contentTotals {
	return &contentTotals{remaining: map[string]int{}, finalizers: map[string]int{}}
}

// remain counts obj, of groupResource, as still present after its deletion.
func (t *contentTotals) remain(groupResource string, obj runtime.Object) {
	t.remaining[groupResource]++
	if m, err := meta.Accessor(obj); err == nil {
		for _, fin := range m.GetFinalizers() {
			t.finalizers[fin]++
		}
	}
}

// namespaceConditionTypes are the conditions a Terminating namespace carries, in the order
// the namespace controller writes them; each is False (all well) or True (the problem).
var namespaceConditionTypes = []corev1.NamespaceConditionType{
	corev1.NamespaceDeletionDiscoveryFailure,
	corev1.NamespaceDeletionGVParsingFailure,
	corev1.NamespaceDeletionContentFailure,
	corev1.NamespaceContentRemaining,
	corev1.NamespaceFinalizersRemaining,
}

// conditions are the namespace conditions that t reports, with the reasons and messages
// of kube-controller-manager's namespace controller (clients and tests match on them).
// Discovery and group version parsing cannot fail here: the registry is the discovery.
func (t *contentTotals) conditions() map[corev1.NamespaceConditionType]corev1.NamespaceCondition {
	ok := func(typ corev1.NamespaceConditionType, reason, message string) corev1.NamespaceCondition {
		return corev1.NamespaceCondition{Type: typ, Status: corev1.ConditionFalse, Reason: reason, Message: message}
	}
	out := map[corev1.NamespaceConditionType]corev1.NamespaceCondition{
		corev1.NamespaceDeletionDiscoveryFailure: ok(corev1.NamespaceDeletionDiscoveryFailure, "ResourcesDiscovered", "All resources successfully discovered"),
		corev1.NamespaceDeletionGVParsingFailure: ok(corev1.NamespaceDeletionGVParsingFailure, "ParsedGroupVersions", "All legacy kube types successfully parsed"),
		corev1.NamespaceDeletionContentFailure:   ok(corev1.NamespaceDeletionContentFailure, "ContentDeleted", "All content successfully deleted, may be waiting on finalization"),
		corev1.NamespaceContentRemaining:         ok(corev1.NamespaceContentRemaining, "ContentRemoved", "All content successfully removed"),
		corev1.NamespaceFinalizersRemaining:      ok(corev1.NamespaceFinalizersRemaining, "ContentHasNoFinalizers", "All content-preserving finalizers finished"),
	}
	if len(t.errs) > 0 {
		msgs := append([]string(nil), t.errs...)
		sort.Strings(msgs)
		out[corev1.NamespaceDeletionContentFailure] = corev1.NamespaceCondition{
			Type: corev1.NamespaceDeletionContentFailure, Status: corev1.ConditionTrue, Reason: "ContentDeletionFailed",
			Message: fmt.Sprintf("Failed to delete all resource types, %d remaining: %v", len(msgs), strings.Join(msgs, ", ")),
		}
	}
	if len(t.remaining) > 0 {
		var parts []string
		for gr, n := range t.remaining {
			// "pods." for the core group, as upstream writes resource.group.
			if !strings.Contains(gr, ".") {
				gr += "."
			}
			parts = append(parts, fmt.Sprintf("%s has %d resource instances", gr, n))
		}
		sort.Strings(parts)
		out[corev1.NamespaceContentRemaining] = corev1.NamespaceCondition{
			Type: corev1.NamespaceContentRemaining, Status: corev1.ConditionTrue, Reason: "SomeResourcesRemain",
			Message: "Some resources are remaining: " + strings.Join(parts, ", "),
		}
	}
	if len(t.finalizers) > 0 {
		var parts []string
		for fin, n := range t.finalizers {
			parts = append(parts, fmt.Sprintf("%s in %d resource instances", fin, n))
		}
		sort.Strings(parts)
		out[corev1.NamespaceFinalizersRemaining] = corev1.NamespaceCondition{
			Type: corev1.NamespaceFinalizersRemaining, Status: corev1.ConditionTrue, Reason: "SomeFinalizersRemain",
			Message: "Some content in the namespace has finalizers remaining: " + strings.Join(parts, ", "),
		}
	}
	return out
}

// setNamespaceConditions merges want into status: a condition whose status changes gets
// now as its transition time, one that only changes reason or message keeps its time, one
// that does not change is left as it is (so an unchanged round writes nothing).
func setNamespaceConditions(status *corev1.NamespaceStatus, want map[corev1.NamespaceConditionType]corev1.NamespaceCondition, now time.Time) {
	for _, typ := range namespaceConditionTypes {
		c := want[typ]
		i := -1
		for j := range status.Conditions {
			if status.Conditions[j].Type == typ {
				i = j
				break
			}
		}
		if i < 0 {
			c.LastTransitionTime = metav1.NewTime(now)
			status.Conditions = append(status.Conditions, c)
			continue
		}
		old := &status.Conditions[i]
		if old.Status != c.Status {
			old.LastTransitionTime = metav1.NewTime(now)
		}
		old.Status, old.Reason, old.Message = c.Status, c.Reason, c.Message
	}
}

// updateConditions writes what a finalization round found into the namespace's status.
func (f *namespaceFinalizer) updateConditions(ctx context.Context, name string, totals *contentTotals) error {
	want := totals.conditions()
	now := f.s.clock.Now().Truncate(time.Second)
	_, err := f.s.store.GuaranteedUpdate(ctx, f.s.namespaces().key(f.s.cfg.EtcdPrefix, "", name), func(cur runtime.Object) (runtime.Object, error) {
		ns := cur.(*corev1.Namespace)
		setNamespaceConditions(&ns.Status, want, now)
		return ns, nil
	}, store.UpdateOptions{})
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	return err
}
