package daemonset

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	core "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
)

// revisionFor builds the ControllerRevision the controller would write for ds's template.
func revisionFor(t testing.TB, ds *appsv1.DaemonSet, revision int64) *appsv1.ControllerRevision {
	t.Helper()
	patch, err := historyPatch(ds)
	if err != nil {
		t.Fatal(err)
	}
	hash := hashOf(ds)
	labels := map[string]string{RevisionHashLabel: hash}
	for k, v := range ds.Spec.Template.Labels {
		labels[k] = v
	}
	return &appsv1.ControllerRevision{
		ObjectMeta: metav1.ObjectMeta{
			Name: revisionName(ds.Name, hash), Namespace: ds.Namespace, UID: newUID(), ResourceVersion: "1",
			Labels:          labels,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(ds, controllerKind)},
		},
		Data:     runtime.RawExtension{Raw: patch},
		Revision: revision,
	}
}

func withTemplateImage(ds *appsv1.DaemonSet, image string) *appsv1.DaemonSet {
	out := ds.DeepCopy()
	out.Spec.Template.Spec.Containers[0].Image = image
	return out
}

func (f *fixture) createdRevisions() []*appsv1.ControllerRevision {
	var out []*appsv1.ControllerRevision
	for _, a := range f.actions("create", "controllerrevisions", "") {
		out = append(out, a.(core.CreateAction).GetObject().(*appsv1.ControllerRevision))
	}
	return out
}

func (f *fixture) updatedRevisions() []*appsv1.ControllerRevision {
	var out []*appsv1.ControllerRevision
	for _, a := range f.actions("update", "controllerrevisions", "") {
		out = append(out, a.(core.UpdateAction).GetObject().(*appsv1.ControllerRevision))
	}
	return out
}

func (f *fixture) deletedRevisions() []string {
	var out []string
	for _, a := range f.actions("delete", "controllerrevisions", "") {
		out = append(out, a.(core.DeleteAction).GetName())
	}
	return sortedCopy(out)
}

func TestFirstRevision(t *testing.T) {
	ds := newDS("web")
	ds.Annotations["kubernetes.io/change-cause"] = "first"
	f := newFixture(t, []runtime.Object{ds, newNode("n")})
	f.mustSync(ds)

	crs := f.createdRevisions()
	if len(crs) != 1 {
		t.Fatalf("created %d revisions", len(crs))
	}
	cr := crs[0]
	hash := hashOf(ds)
	want := revisionFor(t, ds, 1)
	want.UID, want.ResourceVersion = "", ""
	want.Annotations = ds.Annotations
	if !reflect.DeepEqual(cr, want) {
		t.Errorf("revision:\n got %+v\nwant %+v", cr, want)
	}
	if cr.Name != "web-"+hash || !ptr.Deref(cr.OwnerReferences[0].BlockOwnerDeletion, false) {
		t.Errorf("name %q owner %+v", cr.Name, cr.OwnerReferences)
	}
	if p := f.createdPods(); len(p) != 1 || p[0].Labels[RevisionHashLabel] != hash {
		t.Errorf("pod labels %v", p[0].Labels)
	}
}

func TestRevisionHashLabelWins(t *testing.T) {
	ds := newDS("web")
	cr := revisionFor(t, ds, 1)
	cr.Name = "web-custom"
	cr.Labels[RevisionHashLabel] = "custom"
	f := newFixture(t, []runtime.Object{ds, newNode("n"), cr})
	f.mustSync(ds)
	if len(f.createdRevisions()) != 0 {
		t.Error("an existing matching revision must be used")
	}
	if p := f.createdPods(); len(p) != 1 || p[0].Labels[RevisionHashLabel] != "custom" {
		t.Errorf("pods must carry the revision's label: %v", p)
	}
}

func TestRevisionNumbering(t *testing.T) {
	dsA := newDS("web")
	dsB := withTemplateImage(dsA, "busybox:2")
	dsC := withTemplateImage(dsA, "busybox:3")
	tests := []struct {
		name        string
		ds          *appsv1.DaemonSet
		existing    []*appsv1.ControllerRevision
		wantCreate  int64  // revision of a created CR, 0 for none
		wantUpdate  string // name of a CR renumbered
		wantUpdRev  int64
		wantLabelOn string // hash the created pod carries
	}{
		{"new template after one revision", dsB, []*appsv1.ControllerRevision{revisionFor(t, dsA, 1)}, 2, "", 0, hashOf(dsB)},
		{"max+1 with gaps", dsC, []*appsv1.ControllerRevision{revisionFor(t, dsA, 4), revisionFor(t, dsB, 7)}, 8, "", 0, hashOf(dsC)},
		{"rollback reuses and renumbers", dsA, []*appsv1.ControllerRevision{revisionFor(t, dsA, 1), revisionFor(t, dsB, 2)}, 0, "web-" + hashOf(dsA), 3, hashOf(dsA)},
		{"current already newest: untouched", dsB, []*appsv1.ControllerRevision{revisionFor(t, dsA, 1), revisionFor(t, dsB, 2)}, 0, "", 0, hashOf(dsB)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, objects(tt.ds, newNode("n")))
			for _, cr := range tt.existing {
				f.add(cr)
			}
			f.mustSync(tt.ds)
			created := f.createdRevisions()
			switch {
			case tt.wantCreate == 0 && len(created) != 0:
				t.Errorf("unexpected create %+v", created)
			case tt.wantCreate != 0 && (len(created) != 1 || created[0].Revision != tt.wantCreate):
				t.Errorf("created %+v, want revision %d", created, tt.wantCreate)
			}
			updated := f.updatedRevisions()
			switch {
			case tt.wantUpdate == "" && len(updated) != 0:
				t.Errorf("unexpected update %+v", updated)
			case tt.wantUpdate != "" && (len(updated) != 1 || updated[0].Name != tt.wantUpdate || updated[0].Revision != tt.wantUpdRev):
				t.Errorf("updated %+v, want %s at %d", updated, tt.wantUpdate, tt.wantUpdRev)
			}
			if p := f.createdPods(); len(p) != 1 || p[0].Labels[RevisionHashLabel] != tt.wantLabelOn {
				t.Errorf("pod hash label = %v, want %s", p, tt.wantLabelOn)
			}
		})
	}
}

func TestDedupCurrentRevisions(t *testing.T) {
	ds := newDS("web")
	keep := revisionFor(t, ds, 3)
	keep.Name, keep.Labels[RevisionHashLabel] = "web-keep", "keep"
	dup := revisionFor(t, ds, 2)
	dup.Name, dup.Labels[RevisionHashLabel] = "web-dup", "dup"
	onDup := newDaemonPodFor(ds, "n", "dup")
	onKeep := newDaemonPodFor(ds, "n2", "keep")
	f := newFixture(t, objects(ds, newNode("n"), newNode("n2"), onDup, onKeep))
	f.add(keep, dup)
	f.mustSync(ds)

	var patched []string
	for _, a := range f.actions("patch", "pods", "") {
		p := a.(core.PatchAction)
		if p.GetPatchType() != types.MergePatchType || string(p.GetPatch()) != `{"metadata":{"labels":{"controller-revision-hash":"keep"}}}` {
			t.Errorf("relabel patch %s %s", p.GetPatchType(), p.GetPatch())
		}
		patched = append(patched, p.GetName())
	}
	if !reflect.DeepEqual(patched, []string{onDup.Name}) {
		t.Errorf("relabelled %v, want %v", patched, onDup.Name)
	}
	if got := f.deletedRevisions(); !reflect.DeepEqual(got, []string{"web-dup"}) {
		t.Errorf("deleted revisions %v", got)
	}
}

func TestRevisionWithoutHashLabel(t *testing.T) {
	ds := newDS("web")
	cr := revisionFor(t, ds, 1)
	delete(cr.Labels, RevisionHashLabel)
	f := newFixture(t, objects(ds, newNode("n")))
	f.add(cr)
	f.mustSync(ds)
	up := f.updatedRevisions()
	if len(up) != 1 || up[0].Labels[RevisionHashLabel] != cr.Name {
		t.Fatalf("updates %+v", up)
	}
	if p := f.createdPods(); len(p) != 1 || p[0].Labels[RevisionHashLabel] != cr.Name {
		t.Errorf("pod hash must be the revision name: %v", p[0].Labels)
	}
}

func TestCleanupHistory(t *testing.T) {
	base := newDS("web")
	var olds []*appsv1.ControllerRevision
	for i := 1; i <= 4; i++ {
		olds = append(olds, revisionFor(t, withTemplateImage(base, fmt.Sprintf("busybox:old%d", i)), int64(i)))
	}
	hashOfRev := func(i int) string { return olds[i-1].Labels[RevisionHashLabel] }
	tests := []struct {
		name  string
		limit int32
		pods  func(ds *appsv1.DaemonSet) []*corev1.Pod
		want  []int // revisions deleted
	}{
		{"within limit", 4, nil, nil},
		{"oldest first", 2, nil, []int{1, 2}},
		{"live hash spared", 2, func(ds *appsv1.DaemonSet) []*corev1.Pod {
			return []*corev1.Pod{newDaemonPodFor(ds, "n", hashOfRev(1))}
		}, []int{2, 3}},
		{"terminal pods being deleted still count as live", 3, func(ds *appsv1.DaemonSet) []*corev1.Pod {
			return []*corev1.Pod{newDaemonPodFor(ds, "n", hashOfRev(1), phase(corev1.PodFailed), terminating)}
		}, []int{2}},
		{"limit 0 keeps only live and current", 0, func(ds *appsv1.DaemonSet) []*corev1.Pod {
			return []*corev1.Pod{newDaemonPodFor(ds, "n", hashOfRev(3))}
		}, []int{1, 2, 4}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ds := base.DeepCopy()
			ds.Spec.RevisionHistoryLimit = ptr.To(tt.limit)
			f := newFixture(t, objects(ds, newNode("n")))
			for _, cr := range olds {
				cr := cr.DeepCopy()
				cr.OwnerReferences[0].UID = ds.UID
				f.add(cr)
			}
			if tt.pods != nil {
				for _, p := range tt.pods(ds) {
					f.addToCache(p)
				}
			}
			f.mustSync(ds)
			var want []string
			for _, i := range tt.want {
				want = append(want, olds[i-1].Name)
			}
			if got := f.deletedRevisions(); !reflect.DeepEqual(got, sortedCopy(want)) {
				t.Errorf("deleted %v, want %v", got, want)
			}
			if created := f.createdRevisions(); len(created) != 1 || created[0].Revision != 5 {
				t.Errorf("current revision: %+v", created)
			}
		})
	}
}

func TestHashCollision(t *testing.T) {
	t.Run("matching revision created meanwhile is used", func(t *testing.T) {
		ds := newDS("web")
		f := newFixture(t, objects(ds, newNode("n")))
		if err := f.client.Tracker().Add(revisionFor(t, ds, 1)); err != nil { // not in the cache yet
			t.Fatal(err)
		}
		f.mustSync(ds)
		if len(f.createdPods()) != 1 {
			t.Error("sync must proceed with the existing revision")
		}
	})
	t.Run("different revision under the same name bumps collisionCount", func(t *testing.T) {
		ds := newDS("web")
		clash := revisionFor(t, withTemplateImage(ds, "other"), 1)
		clash.Name = revisionName(ds.Name, hashOf(ds))
		clash.OwnerReferences = nil
		clash.Labels = map[string]string{"unrelated": "yes"}
		f := newFixture(t, objects(ds, newNode("n")))
		f.add(clash)
		err := f.sync(ds)
		if err == nil || !strings.Contains(err.Error(), "already exists") {
			t.Fatalf("err = %v, want the AlreadyExists error", err)
		}
		w := f.statusWrites()
		if len(w) != 1 || w[0].Status.CollisionCount == nil || *w[0].Status.CollisionCount != 1 {
			t.Fatalf("status writes %+v, want collisionCount 1", w)
		}
		if len(f.createdPods()) != 0 {
			t.Error("no pods before the revision exists")
		}
		// The next sync hashes with collisionCount 1: a different name.
		ds2 := ds.DeepCopy()
		ds2.Status.CollisionCount = ptr.To[int32](1)
		if hashOf(ds2) == hashOf(ds) {
			t.Error("collisionCount must change the hash")
		}
	})
	t.Run("stale collision count is retried", func(t *testing.T) {
		ds := newDS("web")
		clash := revisionFor(t, withTemplateImage(ds, "other"), 1)
		clash.Name = revisionName(ds.Name, hashOf(ds))
		clash.OwnerReferences = nil
		clash.Labels = nil
		f := newFixture(t, objects(ds, newNode("n")))
		f.add(clash)
		fresh := ds.DeepCopy()
		fresh.Status.CollisionCount = ptr.To[int32](1)
		if err := f.client.Tracker().Update(appsv1.SchemeGroupVersion.WithResource("daemonsets"), fresh, fresh.Namespace); err != nil {
			t.Fatal(err)
		}
		err := f.sync(ds)
		if err == nil || !strings.Contains(err.Error(), "found a stale collision count") {
			t.Fatalf("err = %v", err)
		}
		if len(f.statusWrites()) != 0 {
			t.Error("collisionCount must not be bumped from a stale copy")
		}
	})
}

func TestAdoptOrphanRevision(t *testing.T) {
	ds := newDS("web")
	cr := revisionFor(t, ds, 1)
	cr.OwnerReferences = nil
	f := newFixture(t, objects(ds, newNode("n")))
	f.add(cr)
	f.mustSync(ds)
	patches := f.actions("patch", "controllerrevisions", "")
	if len(patches) != 1 {
		t.Fatalf("patches %v", patches)
	}
	want := fmt.Sprintf(`{"metadata":{"ownerReferences":[{"apiVersion":"apps/v1","kind":"DaemonSet","name":"web","uid":"%s","controller":true,"blockOwnerDeletion":true}],"uid":"%s"}}`, ds.UID, cr.UID)
	if got := string(patches[0].(core.PatchAction).GetPatch()); got != want {
		t.Errorf("patch %s, want %s", got, want)
	}
	if len(f.createdRevisions()) != 0 {
		t.Error("the adopted revision is current; no new one expected")
	}
}
