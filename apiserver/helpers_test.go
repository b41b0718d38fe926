package apiserver_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"

	"github.com/miniplane/miniplane/test/testenv"
)

// pollInterval is how often eventually re-checks a condition.
const pollInterval = 20 * time.Millisecond

// waitTimeout bounds every wait for an asynchronous outcome (namespace finalization,
// watch delivery); generous because -race runs on a shared two-core machine.
const waitTimeout = 60 * time.Second

func newEnv(t testing.TB) *testenv.Env {
	t.Helper()
	return testenv.New(t, testenv.Config{})
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// eventually polls cond until it reports done or fails the test at the deadline with the
// last error cond returned.
func eventually(t testing.TB, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	var last error
	for {
		done, err := cond()
		if done {
			return
		}
		last = err
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s (last error: %v)", what, last)
		}
		time.Sleep(pollInterval)
	}
}

// check fails the test on an unexpected error.
func check(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// expectStatus checks that err is an API error with code and reason.
func expectStatus(t testing.TB, err error, code int32, reason metav1.StatusReason) *apierrors.StatusError {
	t.Helper()
	var se *apierrors.StatusError
	if !errors.As(err, &se) {
		t.Fatalf("got error %v (%T), want a %d %s status", err, err, code, reason)
	}
	if se.ErrStatus.Code != code || se.ErrStatus.Reason != reason {
		t.Fatalf("got %d %s (%s), want %d %s", se.ErrStatus.Code, se.ErrStatus.Reason, se.ErrStatus.Message, code, reason)
	}
	return se
}

// Fixtures. Every object is minimal and valid; tests change what they are about.

func podOn(ns, name, node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{
			NodeName:   node,
			Containers: []corev1.Container{{Name: "c", Image: "registry.example/app:1.0"}},
		},
	}
}

func node(name string) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/os": "linux"}},
		Status: corev1.NodeStatus{
			Capacity:    corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourcePods: resource.MustParse("110")},
			Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourcePods: resource.MustParse("110")},
			Conditions:  []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
		},
	}
}

func daemonSet(ns, name string) *appsv1.DaemonSet {
	labels := map[string]string{"app": name}
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Image: "registry.example/agent:1.0"}}},
			},
		},
	}
}

func lease(ns, name, holder string) *coordinationv1.Lease {
	d := int32(40)
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &d},
	}
}

func event(ns, name string, about *corev1.Pod) *corev1.Event {
	return &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: about.Namespace,
			Name: about.Name, UID: about.UID},
		Reason: "Tested", Message: "a test event", Type: corev1.EventTypeNormal,
		Source: corev1.EventSource{Component: "test"}, Count: 1,
	}
}

func controllerRevision(ns, name string, revision int64) *appsv1.ControllerRevision {
	return &appsv1.ControllerRevision{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Data:       runtime.RawExtension{Raw: []byte(`{"spec":{"template":{"$patch":"replace"}}}`)},
		Revision:   revision,
	}
}

func namesOf(list runtime.Object) []string {
	items, err := meta.ExtractList(list)
	if err != nil {
		panic(err)
	}
	out := make([]string, 0, len(items))
	for _, it := range items {
		m, _ := meta.Accessor(it)
		if m.GetNamespace() != "" {
			out = append(out, m.GetNamespace()+"/"+m.GetName())
		} else {
			out = append(out, m.GetName())
		}
	}
	sort.Strings(out)
	return out
}

// snapshot is every stored object's resourceVersion by "resource/namespace/name": equal
// snapshots mean nothing was written.
func snapshot(t testing.TB, c kubernetes.Interface) map[string]string {
	t.Helper()
	ctx := testCtx(t)
	out := map[string]string{}
	add := func(res string, list runtime.Object, err error) {
		if err != nil {
			t.Fatalf("snapshot %s: %v", res, err)
		}
		items, _ := meta.ExtractList(list)
		for _, it := range items {
			m, _ := meta.Accessor(it)
			out[res+"/"+m.GetNamespace()+"/"+m.GetName()] = m.GetResourceVersion()
		}
	}
	all := metav1.ListOptions{}
	l1, err := c.CoreV1().Namespaces().List(ctx, all)
	add("namespaces", l1, err)
	l2, err := c.CoreV1().Nodes().List(ctx, all)
	add("nodes", l2, err)
	l3, err := c.CoreV1().Pods("").List(ctx, all)
	add("pods", l3, err)
	l4, err := c.CoreV1().Events("").List(ctx, all)
	add("events", l4, err)
	l5, err := c.AppsV1().DaemonSets("").List(ctx, all)
	add("daemonsets", l5, err)
	l6, err := c.AppsV1().ControllerRevisions("").List(ctx, all)
	add("controllerrevisions", l6, err)
	l7, err := c.CoordinationV1().Leases("").List(ctx, all)
	add("leases", l7, err)
	return out
}

func diffSnapshots(before, after map[string]string) string {
	var diffs []string
	for k, v := range before {
		if after[k] != v {
			diffs = append(diffs, fmt.Sprintf("%s: %s → %q", k, v, after[k]))
		}
	}
	for k, v := range after {
		if _, ok := before[k]; !ok {
			diffs = append(diffs, fmt.Sprintf("%s: new at %s", k, v))
		}
	}
	sort.Strings(diffs)
	return strings.Join(diffs, "; ")
}

// rawClient speaks HTTPS to the env's API server with net/http only, for requests a
// typed client would refuse to make.
type rawClient struct {
	env  *testenv.Env
	http *http.Client
}

func newRawClient(t testing.TB, env *testenv.Env) *rawClient {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(env.CAPEM) {
		t.Fatal("bad CA PEM")
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
	t.Cleanup(tr.CloseIdleConnections)
	return &rawClient{env: env, http: &http.Client{Transport: tr, Timeout: time.Minute}}
}

// rawResponse is an answer with its body decoded as a Status when it is one.
type rawResponse struct {
	code   int
	header http.Header
	body   []byte
	status *metav1.Status
}

// request describes one raw request. token "" sends no Authorization header.
type request struct {
	method, path, token, contentType string
	body                             io.Reader
	header                           map[string]string
}

func (c *rawClient) do(t testing.TB, r request) rawResponse {
	t.Helper()
	req, err := http.NewRequestWithContext(testCtx(t), r.method, c.env.URL+r.path, r.body)
	if err != nil {
		t.Fatal(err)
	}
	if r.token != "" {
		req.Header.Set("Authorization", "Bearer "+r.token)
	}
	if r.contentType != "" {
		req.Header.Set("Content-Type", r.contentType)
	}
	for k, v := range r.header {
		req.Header.Set(k, v)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", r.method, r.path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	out := rawResponse{code: resp.StatusCode, header: resp.Header, body: body}
	var st metav1.Status
	if json.Unmarshal(body, &st) == nil && st.Kind == "Status" {
		out.status = &st
	}
	return out
}

// repoRoot finds the module root from the test's working directory.
func repoRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("go.mod not found above the working directory")
		}
		dir = parent
	}
}

// quietLogger drops every log line, for servers a test starts by hand.
func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
