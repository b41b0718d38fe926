package e2e

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/miniplane/miniplane/internal/poll"
	"github.com/miniplane/miniplane/test/testenv"
)

// manifestObjects reads every object of a multi-document YAML file.
func manifestObjects(t *testing.T, path string) []*unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var out []*unstructured.Unstructured
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			return out
		} else if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if len(u.Object) > 0 {
			out = append(out, u)
		}
	}
}

// TestPublishedManifests applies manifests shaped like those popular projects publish for
// their node agents (testdata/manifests) with plain `kubectl apply -f` and default flags,
// so kubectl validates them against the server's OpenAPI first; every DaemonSet in them
// must then run a ready pod on each stub node, and `kubectl delete -f` must remove every
// object again.
func TestPublishedManifests(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "manifests", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests: %v", err)
	}
	const nodes = 3
	env := testenv.New(t, testenv.Everything(nodes))
	home := t.TempDir()
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".yaml"), func(t *testing.T) {
			applyAndRemove(t, env, home, file, nodes, "apply", "-f", file)
		})
	}
	// The file with two dozen definitions once more, with server-side apply.
	t.Run("calico-with-crds/server-side", func(t *testing.T) {
		file := filepath.Join("testdata", "manifests", "calico-with-crds.yaml")
		applyAndRemove(t, env, home, file, nodes, "apply", "--server-side", "-f", file)
	})
}

// applyAndRemove runs the apply command, waits for every DaemonSet of the file to run a
// ready pod on each node, then deletes the file's objects and waits until all are gone.
func applyAndRemove(t *testing.T, env *testenv.Env, home, file string, nodes int32, apply ...string) {
	t.Helper()
	objs := manifestObjects(t, file)
	out := dsKubectl(t, env, home, apply...)
	done := countApplied(out, "created") + countApplied(out, "serverside-applied")
	if done != len(objs) {
		t.Fatalf("kubectl %s: %d of %d objects:\n%s", strings.Join(apply, " "), done, len(objs), out)
	}
	for _, u := range objs {
		if u.GetKind() != "DaemonSet" {
			continue
		}
		ns, name := u.GetNamespace(), u.GetName()
		poll.Until(t, dsTimeout, "DaemonSet "+ns+"/"+name+" ready on every node", func() bool {
			ds, err := env.Client.AppsV1().DaemonSets(ns).Get(context.Background(), name, metav1.GetOptions{})
			return err == nil && dsReadyEverywhere(ds, nodes)
		})
	}
	dsKubectl(t, env, home, "delete", "-f", file, "--timeout=60s")
	poll.Until(t, time.Minute, "every object of the file gone", func() bool {
		left := dsKubectl(t, env, home, "get", "-f", file, "--ignore-not-found", "-o", "name")
		return strings.TrimSpace(left) == ""
	})
}

// countApplied counts the lines in which kubectl reports an object (kind/name) with result,
// such as "configmap/agent-config created"; the warnings the server answers some writes with
// ("Warning: … no pods are created for it") are not such lines.
func countApplied(out, result string) int {
	n := 0
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) == 2 && strings.Contains(f[0], "/") && f[1] == result {
			n++
		}
	}
	return n
}

func dsReadyEverywhere(ds *appsv1.DaemonSet, nodes int32) bool {
	st := ds.Status
	return st.ObservedGeneration == ds.Generation && st.DesiredNumberScheduled == nodes &&
		st.NumberReady == nodes && st.UpdatedNumberScheduled == nodes
}
