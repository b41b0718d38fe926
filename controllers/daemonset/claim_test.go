package daemonset

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"
)

// claimCall is one write a claimer made: "adopt" or "release", the object and the patch.
type claimCall struct {
	verb, name, patch string
}

// claimHarness is a claimer whose writes and uncached DaemonSet GET are recorded fakes.
type claimHarness struct {
	m        *claimer
	calls    []claimCall
	rechecks int
}

func newClaimHarness(t *testing.T, ds *appsv1.DaemonSet, adoptErr, releaseErr, recheckErr error) *claimHarness {
	t.Helper()
	sel, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
	if err != nil {
		t.Fatal(err)
	}
	h := &claimHarness{}
	h.m = &claimer{ds: ds, selector: sel, kind: "Pod"}
	h.m.adopt = func(_ context.Context, obj metav1.Object, p []byte) error {
		h.calls = append(h.calls, claimCall{"adopt", obj.GetName(), string(p)})
		return adoptErr
	}
	h.m.release = func(_ context.Context, obj metav1.Object, p []byte) error {
		h.calls = append(h.calls, claimCall{"release", obj.GetName(), string(p)})
		return releaseErr
	}
	h.m.recheck = func(context.Context) error {
		h.rechecks++
		return recheckErr
	}
	return h
}

// TestClaim covers each decision of claimer.claim: whose object it is, whether it matches,
// whether the DaemonSet or the object is going away, and how adopt and release errors count.
func TestClaim(t *testing.T) {
	podGR := schema.GroupResource{Resource: "pods"}
	notFound := apierrors.NewNotFound(podGR, "p")
	invalid := apierrors.NewInvalid(schema.GroupKind{Kind: "Pod"}, "p", field.ErrorList{field.Invalid(field.NewPath("metadata", "uid"), "x", "immutable")})
	conflict := apierrors.NewConflict(podGR, "p", errors.New("changed"))
	gone := errors.New("original DaemonSet default/web is gone: got uid other, wanted x")

	matching := map[string]string{"app": "web"}
	other := map[string]string{"app": "db"}
	deleting := ptr.To(metav1.NewTime(t0))

	type tc struct {
		name       string
		dsDeleting bool
		owner      string // "self", "other" or "" (orphan)
		labels     map[string]string
		namespace  string // "" means the DaemonSet's
		podGoing   bool
		adoptErr   error
		releaseErr error
		recheckErr error

		want        bool
		wantErr     string // substring; "" means no error
		wantCalls   []string
		wantRecheck int
	}
	tests := []tc{
		{name: "own and matching: kept without a write", owner: "self", labels: matching,
			want: true},
		{name: "another controller's: ignored even if it matches", owner: "other", labels: matching},
		{name: "own but no longer matching: released", owner: "self", labels: other,
			wantCalls: []string{"release"}},
		{name: "own, not matching, while the DaemonSet is being deleted: left alone", dsDeleting: true, owner: "self", labels: other},
		{name: "own and matching while the DaemonSet is being deleted: still ours", dsDeleting: true, owner: "self", labels: matching,
			want: true},
		{name: "release of a pod already gone (NotFound) is not an error", owner: "self", labels: other, releaseErr: notFound,
			wantCalls: []string{"release"}},
		{name: "release refused as Invalid (uid changed) is not an error", owner: "self", labels: other, releaseErr: invalid,
			wantCalls: []string{"release"}},
		{name: "other release errors are returned", owner: "self", labels: other, releaseErr: conflict,
			wantErr: "changed", wantCalls: []string{"release"}},
		{name: "matching orphan: rechecked and adopted", labels: matching,
			want: true, wantCalls: []string{"adopt"}, wantRecheck: 1},
		{name: "orphan gone before adoption (NotFound): not ours, no error", labels: matching, adoptErr: notFound,
			wantCalls: []string{"adopt"}, wantRecheck: 1},
		{name: "other adopt errors are returned", labels: matching, adoptErr: conflict,
			wantErr: "changed", wantCalls: []string{"adopt"}, wantRecheck: 1},
		{name: "orphan that does not match: ignored", labels: other},
		{name: "matching orphan while the DaemonSet is being deleted: not adopted", dsDeleting: true, labels: matching},
		{name: "terminating orphan: not adopted", labels: matching, podGoing: true},
		{name: "matching orphan in another namespace: not adopted", labels: matching, namespace: "kube-system"},
		{name: "recheck failure aborts the adoption", labels: matching, recheckErr: gone,
			wantErr: "can't adopt Pod default/p (uid-p): original DaemonSet default/web is gone", wantRecheck: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ds := newDS("web")
			if tt.dsDeleting {
				ds.DeletionTimestamp = deleting
			}
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: ds.Namespace, UID: "uid-p", Labels: tt.labels}}
			if tt.namespace != "" {
				pod.Namespace = tt.namespace
			}
			if tt.podGoing {
				pod.DeletionTimestamp = deleting
			}
			switch tt.owner {
			case "self":
				pod.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(ds, controllerKind)}
			case "other":
				pod.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(newDS("db"), controllerKind)}
			}
			h := newClaimHarness(t, ds, tt.adoptErr, tt.releaseErr, tt.recheckErr)

			got, err := h.m.claim(t.Context(), pod)
			if got != tt.want {
				t.Errorf("claim = %v, want %v", got, tt.want)
			}
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("err = %v, want none", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("err = %v, want one containing %q", err, tt.wantErr)
			}
			var verbs []string
			for _, c := range h.calls {
				verbs = append(verbs, c.verb)
				want := string(releasePatch(ds.UID, pod.UID))
				if c.verb == "adopt" {
					want = string(adoptPatch(ds, pod.UID))
				}
				if c.name != "p" || c.patch != want {
					t.Errorf("%s of %s with %s, want patch %s", c.verb, c.name, c.patch, want)
				}
			}
			if !reflect.DeepEqual(verbs, tt.wantCalls) {
				t.Errorf("writes = %v, want %v", verbs, tt.wantCalls)
			}
			if h.rechecks != tt.wantRecheck {
				t.Errorf("rechecks = %d, want %d", h.rechecks, tt.wantRecheck)
			}
		})
	}
}

// The uncached recheck runs once per claim pass, before the first adoption, and its failure
// fails every later adoption of the pass too without another GET.
func TestClaimRechecksOncePerPass(t *testing.T) {
	for _, recheckErr := range []error{nil, errors.New("has just been deleted")} {
		t.Run(fmt.Sprintf("recheck error %v", recheckErr), func(t *testing.T) {
			ds := newDS("web")
			h := newClaimHarness(t, ds, nil, nil, recheckErr)
			for i := range 3 {
				pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p%d", i), Namespace: ds.Namespace, Labels: map[string]string{"app": "web"}}}
				ok, err := h.m.claim(t.Context(), pod)
				if ok != (recheckErr == nil) || (err != nil) != (recheckErr != nil) {
					t.Errorf("claim %d = %v, %v", i, ok, err)
				}
			}
			if h.rechecks != 1 {
				t.Errorf("rechecks = %d, want 1", h.rechecks)
			}
			if wantAdopts := map[bool]int{true: 3, false: 0}[recheckErr == nil]; len(h.calls) != wantAdopts {
				t.Errorf("adoptions = %d, want %d", len(h.calls), wantAdopts)
			}
		})
	}
}
