package rootcapublisher

import (
	"context"
	"io"
	"log/slog"
	"maps"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
)

const bundle = "-----BEGIN CERTIFICATE-----\nexample\n-----END CERTIFICATE-----\n"

func namespace(name string, phase corev1.NamespacePhase) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NamespaceStatus{Phase: phase}}
}

// start runs a publisher over client until the test ends.
func start(t *testing.T, client *fake.Clientset) {
	t.Helper()
	factory := informers.NewSharedInformerFactory(client, 0)
	p, err := New(Options{Client: client, Informers: factory, RootCA: []byte(bundle),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); p.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done; factory.Shutdown() })
}

// published polls until namespace ns holds the bundle as the publisher writes it, and
// returns the ConfigMap.
func published(t *testing.T, client *fake.Clientset, ns string) *corev1.ConfigMap {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		cm, err := client.CoreV1().ConfigMaps(ns).Get(context.Background(), ConfigMapName, metav1.GetOptions{})
		if err == nil && maps.Equal(cm.Data, map[string]string{DataKey: bundle}) && cm.Annotations[DescriptionAnnotation] == Description {
			return cm
		}
		if time.Now().After(deadline) {
			t.Fatalf("namespace %s: %s not published (last: %v, %v)", ns, ConfigMapName, cm, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestPublishesIntoEveryNamespace(t *testing.T) {
	client := fake.NewClientset(namespace("default", corev1.NamespaceActive), namespace("kube-system", corev1.NamespaceActive))
	start(t, client)
	published(t, client, "default")
	published(t, client, "kube-system")

	// A namespace created later gets it too.
	_, err := client.CoreV1().Namespaces().Create(context.Background(), namespace("team", corev1.NamespaceActive), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	published(t, client, "team")
}

// TestPutsBackWhatChanged: a deleted ConfigMap comes back, a changed one is restored with
// the labels and other annotations someone added kept, and an unrelated ConfigMap is left
// alone.
func TestPutsBackWhatChanged(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset(namespace("default", corev1.NamespaceActive))
	start(t, client)
	published(t, client, "default")

	cases := []struct {
		name   string
		change func(*corev1.ConfigMap) error
	}{
		{"deleted", func(*corev1.ConfigMap) error {
			return client.CoreV1().ConfigMaps("default").Delete(ctx, ConfigMapName, metav1.DeleteOptions{})
		}},
		{"data changed", func(cm *corev1.ConfigMap) error {
			cm.Data = map[string]string{DataKey: "tampered", "extra": "x"}
			cm.Labels = map[string]string{"team": "a"}
			_, err := client.CoreV1().ConfigMaps("default").Update(ctx, cm, metav1.UpdateOptions{})
			return err
		}},
		{"description removed", func(cm *corev1.ConfigMap) error {
			cm.Annotations = map[string]string{"note": "kept"}
			_, err := client.CoreV1().ConfigMaps("default").Update(ctx, cm, metav1.UpdateOptions{})
			return err
		}},
	}
	for _, tc := range cases {
		cm, err := client.CoreV1().ConfigMaps("default").Get(ctx, ConfigMapName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := tc.change(cm.DeepCopy()); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		got := published(t, client, "default")
		if tc.name == "data changed" && got.Labels["team"] != "a" {
			t.Errorf("%s: labels %v, want the added one kept", tc.name, got.Labels)
		}
		if tc.name == "description removed" && got.Annotations["note"] != "kept" {
			t.Errorf("%s: annotations %v, want the added one kept", tc.name, got.Annotations)
		}
	}

	other := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings", Namespace: "default"}, Data: map[string]string{"a": "1"}}
	if _, err := client.CoreV1().ConfigMaps("default").Create(ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	other.Data["a"] = "2"
	if _, err := client.CoreV1().ConfigMaps("default").Update(ctx, other, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Give the publisher time to act on the update if it (wrongly) would.
	published(t, client, "default")
	got, err := client.CoreV1().ConfigMaps("default").Get(ctx, "settings", metav1.GetOptions{})
	if err != nil || got.Data["a"] != "2" {
		t.Errorf("an unrelated ConfigMap changed: %v, %v", got, err)
	}
}

// TestLeavesTerminatingNamespacesAlone: a namespace on its way out gets nothing.
func TestLeavesTerminatingNamespacesAlone(t *testing.T) {
	client := fake.NewClientset(namespace("going", corev1.NamespaceTerminating), namespace("staying", corev1.NamespaceActive))
	start(t, client)
	// Both namespaces were queued at start; once the active one holds the bundle, the
	// terminating one is watched a while longer for a create that must not come.
	published(t, client, "staying")
	deadline := time.Now().Add(200 * time.Millisecond)
	for time.Now().Before(deadline) {
		if _, err := client.CoreV1().ConfigMaps("going").Get(context.Background(), ConfigMapName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("terminating namespace got %s (err %v)", ConfigMapName, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestNewRefusesAnEmptyBundle(t *testing.T) {
	client := fake.NewClientset()
	if _, err := New(Options{Client: client, Informers: informers.NewSharedInformerFactory(client, 0)}); err == nil {
		t.Fatal("New accepted an empty RootCA")
	}
}
