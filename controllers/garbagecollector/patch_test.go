package garbagecollector

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func TestMergePatch(t *testing.T) {
	yes := true
	ref := func(uid string) metav1.OwnerReference {
		return metav1.OwnerReference{APIVersion: "v1", Kind: "Secret", Name: uid, UID: types.UID(uid), BlockOwnerDeletion: &yes}
	}
	base := func() *metav1.PartialObjectMetadata {
		return &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{UID: "u", ResourceVersion: "7",
			OwnerReferences: []metav1.OwnerReference{ref("a"), ref("b")}, Finalizers: []string{"x", metav1.FinalizerOrphanDependents}}}
	}
	tests := []struct {
		name   string
		mutate func(metav1.Object) bool
		want   string
	}{
		{
			name:   "drop one reference",
			mutate: func(m metav1.Object) bool { return removeOwnerRefs(m, map[types.UID]bool{"a": true}) },
			want:   `{"metadata":{"uid":"u","resourceVersion":"7","ownerReferences":[{"apiVersion":"v1","kind":"Secret","name":"b","uid":"b","blockOwnerDeletion":true}]}}`,
		},
		{
			name:   "drop every reference: an empty list, not a missing field",
			mutate: func(m metav1.Object) bool { return removeOwnerRefs(m, map[types.UID]bool{"a": true, "b": true}) },
			want:   `{"metadata":{"uid":"u","resourceVersion":"7","ownerReferences":[]}}`,
		},
		{
			name:   "unblock in place",
			mutate: func(m metav1.Object) bool { return unblockOwnerRefs(m, map[types.UID]bool{"b": true}) },
			want:   `{"metadata":{"uid":"u","resourceVersion":"7","ownerReferences":[{"apiVersion":"v1","kind":"Secret","name":"a","uid":"a","blockOwnerDeletion":true},{"apiVersion":"v1","kind":"Secret","name":"b","uid":"b","blockOwnerDeletion":false}]}}`,
		},
		{
			name:   "remove a finalizer, keep the others",
			mutate: func(m metav1.Object) bool { return removeFinalizer(m, metav1.FinalizerOrphanDependents) },
			want:   `{"metadata":{"uid":"u","resourceVersion":"7","finalizers":["x"]}}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			obj := base().DeepCopy()
			refs, finalizers := obj.DeepCopy().OwnerReferences, obj.DeepCopy().Finalizers
			if !tt.mutate(obj) {
				t.Fatal("nothing changed")
			}
			got, err := mergePatch(obj, refs, finalizers)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Errorf("patch\n got %s\nwant %s", got, tt.want)
			}
		})
	}
}

// A patch from a stale copy conflicts on its resourceVersion precondition; the collector
// reads the object again and patches the fresh copy, so that what changed meanwhile stays.
func TestPatchConflictIsRetriedOnALiveRead(t *testing.T) {
	owner, other := object(secretKind, "owner"), object(secretKind, "other")
	cm := object(configMapKind, "cm", owner)
	api := newFakeAPI(owner, other, cm)
	gc, _ := newTestGC(t, api, nil)
	// Someone adds a second owner after the collector's copy was made.
	fresh := cm.DeepCopy()
	fresh.OwnerReferences = append(fresh.OwnerReferences, ownedBy(other)...)
	fresh.ResourceVersion = "2"
	if err := api.client.Tracker().Update(configMapKind.gvr, fresh, "default"); err != nil {
		t.Fatal(err)
	}
	item := objectRef{resource: configMapKind.gvr, namespace: "default", name: "cm", uid: cm.UID}
	err := gc.patchMetadata(context.Background(), item, cm, func(m metav1.Object) bool {
		return removeOwnerRefs(m, map[types.UID]bool{owner.UID: true})
	})
	if err != nil {
		t.Fatal(err)
	}
	if api.log.index("conflict configmaps cm") < 0 {
		t.Fatalf("the stale patch did not conflict: %v", api.log.snapshot())
	}
	refs := api.get(t, configMapKind, "cm").OwnerReferences
	if len(refs) != 1 || refs[0].UID != other.UID {
		t.Fatalf("references = %v, want only the owner added meanwhile", refs)
	}
}

func TestSlimMetadataKeepsWhatTheCollectorReads(t *testing.T) {
	now := metav1.Now()
	in := &metav1.PartialObjectMetadata{
		TypeMeta: metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "PartialObjectMetadata"},
		ObjectMeta: metav1.ObjectMeta{Name: "n", Namespace: "ns", UID: "u", ResourceVersion: "9", DeletionTimestamp: &now,
			OwnerReferences: ownedBy(object(secretKind, "s")), Finalizers: []string{"f"},
			Labels: map[string]string{"app": "x"}, Annotations: map[string]string{"kubectl.kubernetes.io/last-applied-configuration": "{}"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}, GenerateName: "n-"},
	}
	out, err := slimMetadata(in)
	if err != nil {
		t.Fatal(err)
	}
	got := out.(*metav1.PartialObjectMetadata)
	want := metav1.ObjectMeta{Name: "n", Namespace: "ns", UID: "u", ResourceVersion: "9", DeletionTimestamp: &now,
		OwnerReferences: in.OwnerReferences, Finalizers: []string{"f"}}
	if got.Name != want.Name || got.Namespace != want.Namespace || got.UID != want.UID || got.ResourceVersion != want.ResourceVersion ||
		got.DeletionTimestamp != want.DeletionTimestamp || len(got.OwnerReferences) != 1 || len(got.Finalizers) != 1 {
		t.Fatalf("kept %+v, want %+v", got.ObjectMeta, want)
	}
	if got.Labels != nil || got.Annotations != nil || got.ManagedFields != nil || got.GenerateName != "" || got.Kind != "" {
		t.Fatalf("kept more than the collector reads: %+v", got)
	}
	if other, _ := slimMetadata("not metadata"); other != "not metadata" {
		t.Fatal("a non-metadata object was changed")
	}
}
