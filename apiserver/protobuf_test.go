package apiserver_test

import (
	"context"
	"reflect"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/miniplane/miniplane/apiserver"
)

// TestProtobufAndJSONClientsAgree reads the same objects through a client that speaks
// protobuf (client-go's default for built-in types) and one that speaks JSON: gets, lists
// (from the watch cache and paginated from etcd) and watches must decode to equal objects.
func TestProtobufAndJSONClientsAgree(t *testing.T) {
	t.Parallel()
	env := newEnv(t)
	ctx := testCtx(t)
	protoCfg := rest.CopyConfig(env.AdminConfig)
	protoCfg.ContentType, protoCfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf", "application/vnd.kubernetes.protobuf"
	jsonCfg := rest.CopyConfig(env.AdminConfig)
	jsonCfg.ContentType, jsonCfg.AcceptContentTypes = runtime.ContentTypeJSON, runtime.ContentTypeJSON
	protoClient, err := kubernetes.NewForConfig(protoCfg)
	check(t, err)
	jsonClient, err := kubernetes.NewForConfig(jsonCfg)
	check(t, err)

	for i, name := range []string{"a", "b", "c"} {
		p := podOn("default", name, "")
		p.Labels["i"] = string(rune('0' + i))
		_, err := protoClient.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{})
		check(t, err)
	}
	for _, opts := range []metav1.ListOptions{{}, {ResourceVersion: "0"}, {Limit: 2}} {
		pl, err := protoClient.CoreV1().Pods("default").List(ctx, opts)
		check(t, err)
		jl, err := jsonClient.CoreV1().Pods("default").List(ctx, opts)
		check(t, err)
		// The continue tokens carry the revision of each list: a write by the test
		// environment's controllers between the two may move it, so only their presence
		// must agree.
		if len(pl.Items) != len(jl.Items) || len(pl.Items) == 0 || (pl.Continue == "") != (jl.Continue == "") {
			t.Fatalf("list %+v: protobuf %d items (continue %q), JSON %d (continue %q)", opts, len(pl.Items), pl.Continue, len(jl.Items), jl.Continue)
		}
		for i := range pl.Items {
			if pl.Items[i].Name != jl.Items[i].Name || pl.Items[i].UID != jl.Items[i].UID ||
				pl.Items[i].Labels["i"] != jl.Items[i].Labels["i"] || pl.Items[i].ResourceVersion != jl.Items[i].ResourceVersion {
				t.Fatalf("list %+v item %d differs: %+v vs %+v", opts, i, pl.Items[i].ObjectMeta, jl.Items[i].ObjectMeta)
			}
		}
	}
	for _, rv := range []string{"", "0"} {
		pp, err := protoClient.CoreV1().Pods("default").Get(ctx, "b", metav1.GetOptions{ResourceVersion: rv})
		check(t, err)
		jp, err := jsonClient.CoreV1().Pods("default").Get(ctx, "b", metav1.GetOptions{ResourceVersion: rv})
		check(t, err)
		if pp.UID != jp.UID || pp.Spec.Containers[0].Image != jp.Spec.Containers[0].Image || pp.Status.Phase != jp.Status.Phase {
			t.Fatalf("get rv=%q differs", rv)
		}
	}

	// A protobuf watch from a resourceVersion sees a change and a bookmark-free stream.
	list, err := protoClient.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
	check(t, err)
	w, err := protoClient.CoreV1().Pods("default").Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	check(t, err)
	defer w.Stop()
	_, err = jsonClient.CoreV1().Pods("default").Patch(ctx, "c", "application/merge-patch+json", []byte(`{"metadata":{"labels":{"seen":"yes"}}}`), metav1.PatchOptions{})
	check(t, err)
	select {
	case ev := <-w.ResultChan():
		p, ok := ev.Object.(*corev1.Pod)
		if ev.Type != watch.Modified || !ok || p.Name != "c" || p.Labels["seen"] != "yes" {
			t.Fatalf("watch event %s %T %+v", ev.Type, ev.Object, ev.Object)
		}
	case <-time.After(waitTimeout):
		t.Fatal("no watch event")
	}

	// sendInitialEvents in protobuf ends with the annotated bookmark.
	sendInitial := true
	w2, err := protoClient.CoreV1().Pods("default").Watch(context.Background(), metav1.ListOptions{
		SendInitialEvents: &sendInitial, AllowWatchBookmarks: true, ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan})
	check(t, err)
	defer w2.Stop()
	added := 0
	for ev := range w2.ResultChan() {
		if ev.Type == watch.Added {
			added++
			continue
		}
		p, ok := ev.Object.(*corev1.Pod)
		if ev.Type != watch.Bookmark || !ok || p.Annotations[metav1.InitialEventsAnnotationKey] != "true" || p.ResourceVersion == "" {
			t.Fatalf("after %d ADDED: %s %+v", added, ev.Type, ev.Object)
		}
		break
	}
	if added != 3 {
		t.Fatalf("%d initial ADDED events, want 3", added)
	}
}

// TestEveryKindListsInProtobuf lists every resource discovery announces in protobuf, the
// way informers of client-go's typed clients read them, and checks each list decodes to
// its kind's list type.
func TestEveryKindListsInProtobuf(t *testing.T) {
	env := newEnv(t)
	ctx := testCtx(t)
	lists, err := env.Client.Discovery().ServerPreferredResources()
	check(t, err)
	cfg := rest.CopyConfig(env.AdminConfig)
	cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf"
	cfg.NegotiatedSerializer = serializer.NewCodecFactory(apiserver.Scheme).WithoutConversion()
	listed := 0
	for _, l := range lists {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		check(t, err)
		cfg.GroupVersion = &gv
		cfg.APIPath = "/apis"
		if gv.Group == "" {
			cfg.APIPath = "/api"
		}
		rc, err := rest.RESTClientFor(cfg)
		check(t, err)
		for _, r := range l.APIResources {
			if !slices.Contains(r.Verbs, "list") {
				continue
			}
			var contentType string
			obj, err := rc.Get().Resource(r.Name).Do(ctx).ContentType(&contentType).Get()
			if err != nil {
				t.Errorf("list %s in protobuf: %v", r.Name, err)
				continue
			}
			if contentType != "application/vnd.kubernetes.protobuf" {
				t.Errorf("list %s answered in %q", r.Name, contentType)
			}
			if got, want := reflect.TypeOf(obj).Elem().Name(), r.Kind+"List"; got != want {
				t.Errorf("list %s decoded to %s, want %s", r.Name, got, want)
			}
			listed++
		}
	}
	if listed < 25 {
		t.Errorf("listed %d resources, want every served kind", listed)
	}
}
