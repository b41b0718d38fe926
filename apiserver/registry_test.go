package apiserver

import (
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// builtinRegistry returns the registry every server starts with.
func builtinRegistry(t testing.TB) *registry {
	t.Helper()
	reg, err := newBuiltinRegistry(builtinDeps{eventTTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

// componentStatusResource is a valid entry for a kind miniplane does not serve, the way a
// new kind is registered. Registration never calls the strategy, so any will do.
func componentStatusResource() *resource {
	return &resource{
		version: "v1", name: "componentstatuses", kind: "ComponentStatus", singular: "componentstatus", namespaced: true,
		newFunc: func() runtime.Object { return &corev1.ComponentStatus{} }, newListFunc: func() runtime.Object { return &corev1.ComponentStatusList{} },
		strategy: leaseStrategy{},
	}
}

func TestRegister(t *testing.T) {
	for _, tc := range []struct {
		name    string
		change  func(r *resource)
		wantErr string // "" means registered
	}{
		{"a new kind", func(*resource) {}, ""},
		{"same resource name in another group", func(r *resource) { r.group, r.name, r.kind = "example.com", "pods", "Pod" }, ""},
		{"duplicate group/version/resource", func(r *resource) { r.name = "pods" }, "resource /v1, Resource=pods is already registered"},
		{"duplicate group/version/kind", func(r *resource) { r.kind = "Pod" }, "kind /v1, Kind=Pod is already registered"},
		{"no strategy", func(r *resource) { r.strategy = nil }, "lacks strategy"},
		{"no Go types", func(r *resource) { r.newFunc, r.newListFunc = nil, nil }, "lacks newFunc, newListFunc"},
		{"no version", func(r *resource) { r.version = "" }, "lacks version"},
		{"upper-case name", func(r *resource) { r.name = "ComponentStatuses" }, "must be lower case"},
		{"subresource twice", func(r *resource) { r.subresources = []subresource{statusSubresource, statusSubresource} }, `subresource "status" needs a unique name`},
		{"subresource without verbs", func(r *resource) { r.subresources = []subresource{{name: "scale"}} }, `subresource "scale" needs a unique name and verbs`},
		{"metadata field declared", func(r *resource) {
			r.fields = fieldsOf(map[string]func(*corev1.ComponentStatus) string{"metadata.name": func(rc *corev1.ComponentStatus) string { return rc.Name }})
		}, "metadata.name is selectable for every kind"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := builtinRegistry(t)
			before := len(reg.resources())
			r := componentStatusResource()
			tc.change(r)
			err := reg.register(r)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("register: %v", err)
				}
				if got := reg.lookup(r.group, r.version, r.name); got != r {
					t.Fatalf("lookup after register = %v, want the new entry", got)
				}
				if got := reg.lookupKind(r.gvk()); got != r {
					t.Fatalf("lookupKind after register = %v, want the new entry", got)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("register: got %v, want an error containing %q", err, tc.wantErr)
			}
			if n := len(reg.resources()); n != before {
				t.Fatalf("a rejected entry changed the registry: %d resources, had %d", n, before)
			}
		})
	}
}

func TestLookup(t *testing.T) {
	reg := builtinRegistry(t)
	for _, tc := range []struct {
		group, version, name string
		wantKind             string // "" means not served
	}{
		{"", "v1", "pods", "Pod"},
		{"", "v1", "namespaces", "Namespace"},
		{"apps", "v1", "daemonsets", "DaemonSet"},
		{"coordination.k8s.io", "v1", "leases", "Lease"},
		{"", "v1", "daemonsets", ""},     // wrong group
		{"apps", "v2", "daemonsets", ""}, // wrong version
		{"", "v1", "pod", ""},            // singular is no resource name
		{"", "v1", "Pods", ""},
	} {
		r := reg.lookup(tc.group, tc.version, tc.name)
		switch {
		case tc.wantKind == "" && r != nil:
			t.Errorf("lookup(%q, %q, %q) = %s, want nothing", tc.group, tc.version, tc.name, r.kind)
		case tc.wantKind != "" && (r == nil || r.kind != tc.wantKind):
			t.Errorf("lookup(%q, %q, %q) = %v, want %s", tc.group, tc.version, tc.name, r, tc.wantKind)
		case r != nil && reg.lookupKind(r.gvk()) != r:
			t.Errorf("lookupKind(%s) does not find the entry lookup found", r.gvk())
		}
	}
	if r := reg.lookupKind(schema.GroupVersionKind{Version: "v1", Kind: "ComponentStatus"}); r != nil {
		t.Errorf("lookupKind(ComponentStatus) = %v, want nothing", r)
	}
	want := []schema.GroupVersion{{Version: "v1"}, {Group: "apps", Version: "v1"}, {Group: "events.k8s.io", Version: "v1"}, {Group: "coordination.k8s.io", Version: "v1"},
		{Group: "batch", Version: "v1"}, {Group: "policy", Version: "v1"}, {Group: "scheduling.k8s.io", Version: "v1"},
		{Group: "rbac.authorization.k8s.io", Version: "v1"}, {Group: "networking.k8s.io", Version: "v1"}, {Group: "discovery.k8s.io", Version: "v1"},
		{Group: "apiextensions.k8s.io", Version: "v1"}, {Group: "storage.k8s.io", Version: "v1"}, {Group: "node.k8s.io", Version: "v1"},
		{Group: "apiregistration.k8s.io", Version: "v1"}, {Group: "admissionregistration.k8s.io", Version: "v1"}}
	if got := reg.groupVersions(); !reflect.DeepEqual(got, want) {
		t.Errorf("groupVersions = %v, want %v", got, want)
	}
	var apps []string
	for _, r := range reg.inGroupVersion("apps", "v1") {
		apps = append(apps, r.name)
	}
	if want := []string{"daemonsets", "controllerrevisions", "deployments", "replicasets", "statefulsets"}; !reflect.DeepEqual(apps, want) {
		t.Errorf("inGroupVersion(apps/v1) = %v, want %v", apps, want)
	}
	if r := reg.lookupGroupResource(schema.GroupResource{Group: "policy", Resource: "poddisruptionbudgets"}); r == nil || r.kind != "PodDisruptionBudget" {
		t.Errorf("lookupGroupResource(poddisruptionbudgets.policy) = %v, want PodDisruptionBudget", r)
	}
}

// TestBuiltinResourcesConsistent checks every served entry against the Kubernetes types
// it claims to serve: a kind, list kind, resource name or subresource kind that client-go
// would not recognize breaks clients only at run time.
func TestBuiltinResourcesConsistent(t *testing.T) {
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, r := range builtinRegistry(t).resources() {
		t.Run(r.name, func(t *testing.T) {
			obj, list := r.newFunc(), r.newListFunc()
			want, err := Scheme.New(r.gvk())
			if err != nil {
				t.Fatalf("the scheme does not know %s: %v", r.gvk(), err)
			}
			if reflect.TypeOf(obj) != reflect.TypeOf(want) {
				t.Errorf("newFunc makes %T, %s is %T", obj, r.gvk(), want)
			}
			wantList, err := Scheme.New(r.gvk().GroupVersion().WithKind(r.listKind()))
			if err != nil {
				t.Fatalf("the scheme does not know list kind %s: %v", r.listKind(), err)
			}
			if reflect.TypeOf(list) != reflect.TypeOf(wantList) {
				t.Errorf("newListFunc makes %T, %s is %T", list, r.listKind(), wantList)
			}
			if !meta.IsListType(list) {
				t.Errorf("%T is not a list type", list)
			}
			if plural, singular := meta.UnsafeGuessKindToResource(r.gvk()); r.name != plural.Resource || r.singular != singular.Resource {
				t.Errorf("names %q/%q, want %q/%q for kind %s", r.name, r.singular, plural.Resource, singular.Resource, r.kind)
			}
			if r.storageName() != r.name {
				t.Errorf("storage name %q differs from the resource name %q", r.storageName(), r.name)
			}
			for _, sub := range r.subresources {
				if _, err := Scheme.New(r.subresourceGVK(&sub)); err != nil {
					t.Errorf("subresource %s: the scheme does not know its kind: %v", sub.name, err)
				}
			}
			if cols, row := r.strategy.tableColumns(), r.strategy.tableRow(obj, now); len(cols) != len(row) {
				t.Errorf("%d table columns but %d cells in a row", len(cols), len(row))
			}
		})
	}
}

// TestSelectableFields resolves the fields of every kind on a sample object: each name
// a fieldSelector may use has a value, and nothing else does.
func TestSelectableFields(t *testing.T) {
	reg := builtinRegistry(t)
	om := metav1.ObjectMeta{Namespace: "ns1", Name: "obj1"}
	clusterMeta := metav1.ObjectMeta{Name: "obj1"}
	for _, tc := range []struct {
		resource string
		obj      runtime.Object
		want     fields.Set
	}{
		{"pods", &corev1.Pod{ObjectMeta: om,
			Spec: corev1.PodSpec{NodeName: "n1", RestartPolicy: corev1.RestartPolicyNever, SchedulerName: "s",
				ServiceAccountName: "sa", HostNetwork: true},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.1", NominatedNodeName: "n2"}},
			fields.Set{"metadata.name": "obj1", "metadata.namespace": "ns1", "spec.nodeName": "n1", "spec.restartPolicy": "Never",
				"spec.schedulerName": "s", "spec.serviceAccountName": "sa", "spec.hostNetwork": "true",
				"status.phase": "Running", "status.podIP": "10.0.0.1", "status.nominatedNodeName": "n2"}},
		{"nodes", &corev1.Node{ObjectMeta: clusterMeta, Spec: corev1.NodeSpec{Unschedulable: true}},
			fields.Set{"metadata.name": "obj1", "spec.unschedulable": "true"}},
		{"namespaces", &corev1.Namespace{ObjectMeta: clusterMeta, Status: corev1.NamespaceStatus{Phase: corev1.NamespaceTerminating}},
			fields.Set{"metadata.name": "obj1", "status.phase": "Terminating"}},
		{"events", &corev1.Event{ObjectMeta: om,
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: "ns1", Name: "p", UID: "u1", APIVersion: "v1",
				ResourceVersion: "7", FieldPath: "spec.containers{c}"},
			Reason: "Started", ReportingController: "kubelet", Type: "Normal"},
			fields.Set{"metadata.name": "obj1", "metadata.namespace": "ns1", "involvedObject.kind": "Pod",
				"involvedObject.namespace": "ns1", "involvedObject.name": "p", "involvedObject.uid": "u1",
				"involvedObject.apiVersion": "v1", "involvedObject.resourceVersion": "7", "involvedObject.fieldPath": "spec.containers{c}",
				"reason": "Started", "reportingComponent": "kubelet", "source": "kubelet", "type": "Normal"}},
		// events.k8s.io/v1 selects on its own names, and has no source.
		{"events", &eventsv1.Event{ObjectMeta: om,
			Regarding: corev1.ObjectReference{Kind: "Pod", Namespace: "ns1", Name: "p", UID: "u1", APIVersion: "v1",
				ResourceVersion: "7", FieldPath: "spec.containers{c}"},
			Reason: "Started", ReportingController: "kubelet", Type: "Normal", DeprecatedSource: corev1.EventSource{Component: "kubelet-old"}},
			fields.Set{"metadata.name": "obj1", "metadata.namespace": "ns1", "regarding.kind": "Pod",
				"regarding.namespace": "ns1", "regarding.name": "p", "regarding.uid": "u1",
				"regarding.apiVersion": "v1", "regarding.resourceVersion": "7", "regarding.fieldPath": "spec.containers{c}",
				"reason": "Started", "reportingController": "kubelet", "type": "Normal"}},
		{"daemonsets", &appsv1.DaemonSet{ObjectMeta: om}, fields.Set{"metadata.name": "obj1", "metadata.namespace": "ns1"}},
		{"controllerrevisions", &appsv1.ControllerRevision{ObjectMeta: om}, fields.Set{"metadata.name": "obj1", "metadata.namespace": "ns1"}},
		{"leases", &coordinationv1.Lease{ObjectMeta: om}, fields.Set{"metadata.name": "obj1", "metadata.namespace": "ns1"}},
		{"secrets", &corev1.Secret{ObjectMeta: om, Type: corev1.SecretTypeTLS},
			fields.Set{"metadata.name": "obj1", "metadata.namespace": "ns1", "type": "kubernetes.io/tls"}},
		{"services", &corev1.Service{ObjectMeta: om, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, ClusterIP: "10.96.0.9"}},
			fields.Set{"metadata.name": "obj1", "metadata.namespace": "ns1", "spec.type": "NodePort", "spec.clusterIP": "10.96.0.9"}},
		{"replicasets", &appsv1.ReplicaSet{ObjectMeta: om, Status: appsv1.ReplicaSetStatus{Replicas: 3}},
			fields.Set{"metadata.name": "obj1", "metadata.namespace": "ns1", "status.replicas": "3"}},
		{"jobs", &batchv1.Job{ObjectMeta: om, Status: batchv1.JobStatus{Succeeded: 2}},
			fields.Set{"metadata.name": "obj1", "metadata.namespace": "ns1", "status.successful": "2"}},
		{"clusterroles", &rbacv1.ClusterRole{ObjectMeta: clusterMeta}, fields.Set{"metadata.name": "obj1"}},
	} {
		t.Run(tc.resource, func(t *testing.T) {
			// By the object's kind: events are served in two groups.
			gvks, _, err := Scheme.ObjectKinds(tc.obj)
			if err != nil {
				t.Fatal(err)
			}
			r := reg.lookupKind(gvks[0])
			if r == nil || r.name != tc.resource {
				t.Fatalf("%s is not registered for %s", tc.resource, gvks[0])
			}
			m, _ := meta.Accessor(tc.obj)
			got := asSet(r.objectFields(tc.obj, m.GetName(), m.GetNamespace()))
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("fields\n got %v\nwant %v", got, tc.want)
			}
			for f := range tc.want {
				if !r.supportsField(f) {
					t.Errorf("supportsField(%q) = false for a field the object has", f)
				}
			}
			for _, f := range []string{"spec.bogus", "metadata.uid", "status.phase.x"} {
				if r.supportsField(f) {
					t.Errorf("supportsField(%q) = true", f)
				}
			}
			if !r.namespaced && r.supportsField("metadata.namespace") {
				t.Errorf("a cluster-scoped kind supports metadata.namespace")
			}
		})
	}
	t.Run("every kind is covered", func(t *testing.T) {
		for _, r := range reg.resources() {
			obj := r.newFunc()
			got := asSet(r.objectFields(obj, "x", "y"))
			if want := len(r.fields) + 1 + btoi(r.namespaced); len(got) != want {
				t.Errorf("%s: %d fields on a sample object, want %d", r.name, len(got), want)
			}
		}
	})
	t.Run("event source falls back to the reporting controller", func(t *testing.T) {
		ev := &corev1.Event{Source: corev1.EventSource{Component: "kubelet"}, ReportingController: "other"}
		if got := eventFields["source"](ev); got != "kubelet" {
			t.Errorf("source = %q, want the source component", got)
		}
	})
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestRegisterWhileServing registers kinds while other goroutines look kinds up, as a
// custom resource definition will at run time; run it with -race.
func TestRegisterWhileServing(t *testing.T) {
	reg := builtinRegistry(t)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if reg.lookup("", "v1", "pods") == nil {
					t.Error("pods vanished during a registration")
					return
				}
				_ = reg.lookup("example.com", "v1", "widgets")
				_ = reg.resources()
				_ = reg.groupVersions()
			}
		}()
	}
	for i := 0; i < 50; i++ {
		r := componentStatusResource()
		r.group = "example.com"
		r.name = "widgets" + strings.Repeat("x", i)
		r.kind = "Widget" + strings.Repeat("X", i)
		if err := reg.register(r); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	if r := reg.lookup("example.com", "v1", "widgets"); r == nil || r.kind != "Widget" {
		t.Fatalf("lookup of a kind registered at run time = %v", r)
	}
}
