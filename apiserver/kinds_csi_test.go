package apiserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
)

func attachment(name, pv string) *storagev1.VolumeAttachment {
	return &storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: storagev1.VolumeAttachmentSpec{Attacher: "csi.example.com", NodeName: "node-a",
			Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: &pv}}}
}

// TestCSIKindsInvalid: VolumeAttachments and CSIStorageCapacities are refused with every
// problem named as kube-apiserver names it, and nothing is stored.
func TestCSIKindsInvalid(t *testing.T) {
	env := newEnv(t)
	const ns = "default"
	negative := resource.MustParse("-1Gi")
	block := corev1.PersistentVolumeBlock
	tests := []invalidCreate{
		{"attachment without attacher or source, bad node name", func(ctx context.Context, c kubernetes.Interface) error {
			_, err := c.StorageV1().VolumeAttachments().Create(ctx, &storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: "va"},
				Spec: storagev1.VolumeAttachmentSpec{NodeName: "Node_A"}}, metav1.CreateOptions{})
			return err
		}, []string{"spec.attacher", "spec.nodeName", "spec.source"}},
		{"attachment with both sources and a driver name that is no name", func(ctx context.Context, c kubernetes.Interface) error {
			va := attachment("va", "pv-1")
			va.Spec.Attacher = "csi_example!"
			va.Spec.Source.InlineVolumeSpec = &corev1.PersistentVolumeSpec{}
			_, err := c.StorageV1().VolumeAttachments().Create(ctx, va, metav1.CreateOptions{})
			return err
		}, []string{"spec.attacher", "spec.source"}},
		{"attachment of an empty volume name", func(ctx context.Context, c kubernetes.Interface) error {
			_, err := c.StorageV1().VolumeAttachments().Create(ctx, attachment("va", ""), metav1.CreateOptions{})
			return err
		}, []string{"spec.source.persistentVolumeName", "spec.source.persistentVolumeName"}},
		{"inline volume that is no CSI volume", func(ctx context.Context, c kubernetes.Interface) error {
			va := attachment("va", "")
			va.Spec.Source.PersistentVolumeName = nil
			va.Spec.Source.InlineVolumeSpec = &corev1.PersistentVolumeSpec{
				Capacity:   corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
				ClaimRef:   &corev1.ObjectReference{Name: "claim"},
				VolumeMode: &block, StorageClassName: "fast",
				PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/data"}}}
			_, err := c.StorageV1().VolumeAttachments().Create(ctx, va, metav1.CreateOptions{})
			return err
		}, []string{"spec.source.inlineVolumeSpec.accessModes", "spec.source.inlineVolumeSpec.capacity",
			"spec.source.inlineVolumeSpec.claimRef", "spec.source.inlineVolumeSpec.csi",
			"spec.source.inlineVolumeSpec.storageClassName", "spec.source.inlineVolumeSpec.volumeMode"}},
		{"inline CSI volume beside another source, without a handle", func(ctx context.Context, c kubernetes.Interface) error {
			va := attachment("va", "")
			va.Spec.Source.PersistentVolumeName = nil
			va.Spec.Source.InlineVolumeSpec = &corev1.PersistentVolumeSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: "csi.example.com"},
					NFS: &corev1.NFSVolumeSource{Server: "nfs.example", Path: "/x"}}}
			_, err := c.StorageV1().VolumeAttachments().Create(ctx, va, metav1.CreateOptions{})
			return err
		}, []string{"spec.source.inlineVolumeSpec.csi.volumeHandle", "spec.source.inlineVolumeSpec.nfs"}},
		{"capacity", func(ctx context.Context, c kubernetes.Interface) error {
			_, err := c.StorageV1().CSIStorageCapacities(ns).Create(ctx, &storagev1.CSIStorageCapacity{
				ObjectMeta:       metav1.ObjectMeta{Name: "cap"},
				StorageClassName: "Fast_SSD", Capacity: &negative,
				NodeTopology: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
					{Key: "topology.example.com/zone", Operator: metav1.LabelSelectorOpIn}}}}, metav1.CreateOptions{})
			return err
		}, []string{"capacity", "nodeTopology.matchExpressions[0].values", "storageClassName"}},
	}
	runInvalid(t, env.Client, tests)
}

// TestVolumeAttachmentLifecycle: what an external attacher does with a VolumeAttachment
// works as against kube-apiserver: it watches them, it writes status through the status
// subresource only, and nobody changes the spec of one.
func TestVolumeAttachmentLifecycle(t *testing.T) {
	env := newEnv(t)
	c := env.Client.StorageV1()
	ctx := testCtx(t)

	w, err := c.VolumeAttachments().Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=csi-0123"})
	check(t, err)
	defer w.Stop()

	va := attachment("csi-0123", "pv-1")
	va.Status.Attached = true // a create starts with an empty status
	va, err = c.VolumeAttachments().Create(ctx, va, metav1.CreateOptions{})
	check(t, err)
	if va.Status.Attached {
		t.Error("a create set status.attached")
	}
	_, err = c.VolumeAttachments().Create(ctx, attachment("other", "pv-2"), metav1.CreateOptions{})
	check(t, err)

	moved := va.DeepCopy()
	moved.Spec.NodeName = "node-b"
	_, err = c.VolumeAttachments().Update(ctx, moved, metav1.UpdateOptions{})
	if got := causeFields(t, err); strings.Join(got, ",") != "spec" {
		t.Errorf("moving an attachment: causes %v, want spec", got)
	}

	bad := va.DeepCopy()
	code := int32(-5)
	bad.Status.AttachError = &storagev1.VolumeError{Message: strings.Repeat("x", 1025), ErrorCode: &code}
	_, err = c.VolumeAttachments().UpdateStatus(ctx, bad, metav1.UpdateOptions{})
	if got := causeFields(t, err); strings.Join(got, ",") != "status.attachError.errorCode,status.attachError.message" {
		t.Errorf("an invalid attach error: causes %v", got)
	}

	va.Status.Attached = true
	va.Status.AttachmentMetadata = map[string]string{"devicePath": "/dev/xvdb"}
	va.Spec.NodeName = "node-b" // a status write keeps the stored spec
	va, err = c.VolumeAttachments().UpdateStatus(ctx, va, metav1.UpdateOptions{})
	check(t, err)
	if !va.Status.Attached || va.Spec.NodeName != "node-a" {
		t.Errorf("after the status write: attached %v on %s, want true on node-a", va.Status.Attached, va.Spec.NodeName)
	}
	va.Status.Attached = false // and a write of the main resource keeps the stored status
	va.Labels = map[string]string{"checked": "yes"}
	va, err = c.VolumeAttachments().Update(ctx, va, metav1.UpdateOptions{})
	check(t, err)
	if !va.Status.Attached || va.Labels["checked"] != "yes" {
		t.Errorf("an update of the main resource: attached %v, labels %v; want the status kept, the label set", va.Status.Attached, va.Labels)
	}

	deadline := time.After(10 * time.Second)
	var seen []watch.EventType
	for len(seen) < 3 {
		select {
		case ev := <-w.ResultChan():
			got, ok := ev.Object.(*storagev1.VolumeAttachment)
			if !ok || got.Name != "csi-0123" {
				t.Fatalf("watch sent %s %#v", ev.Type, ev.Object)
			}
			seen = append(seen, ev.Type)
		case <-deadline:
			t.Fatalf("the watch sent %v in 10 s, want ADDED and two MODIFIED", seen)
		}
	}
	if seen[0] != watch.Added || seen[1] != watch.Modified || seen[2] != watch.Modified {
		t.Errorf("watch events %v, want ADDED, MODIFIED, MODIFIED", seen)
	}

	rows := tableRows(t, env.Client, "volumeattachments", "")
	if want := "csi-0123 csi.example.com pv-1 node-a true"; len(rows) != 2 || !strings.HasPrefix(rows[0], want) {
		t.Errorf("kubectl get volumeattachments rows %q, want the first to start %q", rows, want)
	}
}

// TestCSIStorageCapacity: a provisioner's capacities are stored, their topology and
// class stay as created, and `kubectl get` shows them as it does from a cluster.
func TestCSIStorageCapacity(t *testing.T) {
	env := newEnv(t)
	c := env.Client.StorageV1()
	ctx := testCtx(t)
	const ns = "default"

	size := resource.MustParse("100Gi")
	capacity, err := c.CSIStorageCapacities(ns).Create(ctx, &storagev1.CSIStorageCapacity{
		ObjectMeta:       metav1.ObjectMeta{GenerateName: "csisc-"},
		StorageClassName: "fast",
		NodeTopology:     &metav1.LabelSelector{MatchLabels: map[string]string{"topology.example.com/zone": "a"}},
		Capacity:         &size}, metav1.CreateOptions{})
	check(t, err)
	_, err = c.CSIStorageCapacities(ns).Create(ctx, &storagev1.CSIStorageCapacity{ObjectMeta: metav1.ObjectMeta{Name: "unknown"},
		StorageClassName: "slow"}, metav1.CreateOptions{})
	check(t, err)

	moved := capacity.DeepCopy()
	moved.StorageClassName = "slow"
	moved.NodeTopology.MatchLabels["topology.example.com/zone"] = "b"
	_, err = c.CSIStorageCapacities(ns).Update(ctx, moved, metav1.UpdateOptions{})
	if got := causeFields(t, err); strings.Join(got, ",") != "nodeTopology,storageClassName" {
		t.Errorf("changing topology and class: causes %v", got)
	}
	less := resource.MustParse("40Gi")
	capacity.Capacity = &less
	capacity, err = c.CSIStorageCapacities(ns).Update(ctx, capacity, metav1.UpdateOptions{})
	check(t, err)
	if capacity.Capacity.Cmp(less) != 0 {
		t.Errorf("capacity %v after the update, want 40Gi", capacity.Capacity)
	}

	rows := tableRows(t, env.Client, "csistoragecapacities", ns)
	want := []string{capacity.Name + " fast 40Gi", "unknown slow <unset>"}
	if strings.Join(rows, "|") != strings.Join(want, "|") {
		t.Errorf("kubectl get csistoragecapacities rows %q, want %q", rows, want)
	}
}

// tableRows returns the rows `kubectl get` would print for a storage.k8s.io/v1 resource,
// the cells of each joined by spaces, in the server's order.
func tableRows(t *testing.T, c kubernetes.Interface, resourceName, namespace string) []string {
	t.Helper()
	raw, err := c.StorageV1().RESTClient().Get().Namespace(namespace).Resource(resourceName).
		SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").DoRaw(testCtx(t))
	check(t, err)
	return rowsOf(t, raw)
}

// rowsOf returns the rows of a Table as `kubectl get` prints them, the cells of each
// joined by spaces.
func rowsOf(t *testing.T, raw []byte) []string {
	t.Helper()
	var table metav1.Table
	check(t, json.Unmarshal(raw, &table))
	var rows []string
	for _, r := range table.Rows {
		var cells []string
		for _, cell := range r.Cells {
			cells = append(cells, fmt.Sprint(cell))
		}
		rows = append(rows, strings.Join(cells, " "))
	}
	return rows
}
