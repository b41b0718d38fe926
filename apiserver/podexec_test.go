package apiserver_test

import (
	"net/http"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestPodStreamingSubresources: kubectl exec, attach, port-forward and cp get a Status that
// says the stub node runs no containers, after the usual answers for an unscheduled pod, an
// unknown container, a completed pod and a missing pod; the subresources are in discovery.
func TestPodStreamingSubresources(t *testing.T) {
	t.Parallel()
	env := newEnv(t)
	ctx := testCtx(t)
	k := newKubectl(t, env)
	pods := env.Client.CoreV1().Pods("default")
	_, err := pods.Create(ctx, podOn("default", "unbound", ""), metav1.CreateOptions{})
	check(t, err)
	web, err := pods.Create(ctx, podOn("default", "web", "n1"), metav1.CreateOptions{})
	check(t, err)
	// kubectl port-forward wants a Running pod before it asks the server.
	web.Status.Phase = corev1.PodRunning
	_, err = pods.UpdateStatus(ctx, web, metav1.UpdateOptions{})
	check(t, err)
	done, err := pods.Create(ctx, podOn("default", "done", "n1"), metav1.CreateOptions{})
	check(t, err)
	done.Status.Phase = corev1.PodSucceeded
	_, err = pods.UpdateStatus(ctx, done, metav1.UpdateOptions{})
	check(t, err)

	const stub = `Error from server (BadRequest): miniplane: cannot %s container "c" of pod web: it runs on the stub node n1, which runs no containers`
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"exec", []string{"exec", "web", "--", "true"}, strings.Replace(stub, "%s", "exec into", 1)},
		{"exec -it", []string{"exec", "-i", "web", "-c", "c", "--", "sh"}, strings.Replace(stub, "%s", "exec into", 1)},
		{"attach", []string{"attach", "web"}, strings.Replace(stub, "%s", "attach to", 1)},
		{"cp is exec running tar", []string{"cp", "default/web:/etc/hostname", t.TempDir() + "/hostname"}, strings.Replace(stub, "%s", "exec into", 1)},
		{"port-forward", []string{"port-forward", "--address", "127.0.0.1", "pod/web", ":8080"},
			"miniplane: cannot forward a port to pod web: it runs on the stub node n1, which runs no containers"},
		{"unknown container", []string{"exec", "web", "-c", "nope", "--", "true"}, "container nope is not valid for pod web"},
		{"unscheduled pod", []string{"exec", "unbound", "--", "true"}, "pod unbound does not have a host assigned"},
		{"missing pod", []string{"exec", "missing", "--", "true"}, `pods "missing" not found`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stdout, stderr, err := k.try(tt.args...)
			if err == nil {
				t.Fatalf("kubectl %s succeeded: %s", strings.Join(tt.args, " "), stdout)
			}
			if !strings.Contains(stderr, tt.want) {
				t.Errorf("kubectl %s: stderr\n%s\nwant it to contain\n%s", strings.Join(tt.args, " "), stderr, tt.want)
			}
		})
	}

	// The completed-pod check is kubectl's own too; the server's answer, through client-go:
	err = env.Client.CoreV1().RESTClient().Post().Namespace("default").Resource("pods").Name("done").
		SubResource("exec").Param("command", "true").Do(ctx).Error()
	if se := expectStatus(t, err, http.StatusBadRequest, metav1.StatusReasonBadRequest); !strings.Contains(se.ErrStatus.Message, "completed pod; current phase is Succeeded") {
		t.Errorf("exec into a completed pod: %q", se.ErrStatus.Message)
	}

	res, err := env.Client.Discovery().ServerResourcesForGroupVersion("v1")
	check(t, err)
	want := map[string]bool{"pods/exec": true, "pods/attach": true, "pods/portforward": true}
	for _, r := range res.APIResources {
		if want[r.Name] && strings.Join(r.Verbs, ",") == "create,get" {
			delete(want, r.Name)
		}
	}
	if len(want) != 0 {
		t.Errorf("discovery lacks %v with verbs create,get", want)
	}
}
