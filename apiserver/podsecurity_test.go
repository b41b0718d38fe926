package apiserver_test

import (
	"bytes"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/miniplane/miniplane/configs"
	"github.com/miniplane/miniplane/test/testenv"
)

// TestPodSecurityAdmission: a namespace's pod-security.kubernetes.io labels are enforced on
// pods and ephemeral containers, warned about for pods and pod templates (a DaemonSet's),
// and written to the audit log; a new enforce level warns of the pods already there; a bad
// label value is refused; namespaces without labels are privileged.
func TestPodSecurityAdmission(t *testing.T) {
	t.Parallel()
	auditPath := t.TempDir() + "/audit.log"
	api := configs.DefaultAPIServer()
	api.AuditLogPath = auditPath
	env := testenv.New(t, testenv.Config{APIServer: &api})
	ctx := testCtx(t)
	client, seen := warnedClient(t, env)
	_, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "secure", Labels: map[string]string{
		"pod-security.kubernetes.io/enforce": "baseline",
		"pod-security.kubernetes.io/warn":    "restricted",
		"pod-security.kubernetes.io/audit":   "restricted",
	}}}, metav1.CreateOptions{})
	check(t, err)
	pods := client.CoreV1().Pods("secure")
	eventually(t, "the namespace's labels in the cache", func() (bool, error) {
		_, err := pods.Create(ctx, hostPod("probe"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err != nil, nil
	})
	seen.take()

	const restrictedWarning = `would violate PodSecurity "restricted:latest": `
	t.Run("enforce", func(t *testing.T) {
		_, err := pods.Create(ctx, hostPod("agent"), metav1.CreateOptions{})
		se := expectStatus(t, err, http.StatusForbidden, metav1.StatusReasonForbidden)
		want := `pods "agent" is forbidden: violates PodSecurity "baseline:latest": host namespaces (hostNetwork=true), privileged (container "c" must not set securityContext.privileged=true)`
		if se.ErrStatus.Message != want {
			t.Errorf("message %q\nwant %q", se.ErrStatus.Message, want)
		}
	})
	t.Run("warn and audit", func(t *testing.T) {
		_, err := pods.Create(ctx, podOn("secure", "web", "n1"), metav1.CreateOptions{})
		check(t, err)
		if w := seen.take(); len(w) != 1 || !strings.HasPrefix(w[0], restrictedWarning) || !strings.Contains(w[0], `runAsNonRoot != true`) {
			t.Errorf("warnings %q, want one starting %q", w, restrictedWarning)
		}
		logged, err := os.ReadFile(auditPath)
		check(t, err)
		var line []byte
		for _, l := range bytes.Split(logged, []byte("\n")) {
			if bytes.Contains(l, []byte(`"verb":"create"`)) && bytes.Contains(l, []byte(`"name":"web"`)) && bytes.Contains(l, []byte(`"stage":"ResponseComplete"`)) {
				line = l
			}
		}
		for _, want := range []string{`"pod-security.kubernetes.io/enforce-policy":"baseline:latest"`, `"pod-security.kubernetes.io/audit-violations":"would violate PodSecurity \"restricted:latest\"`} {
			if !bytes.Contains(line, []byte(want)) {
				t.Errorf("audit event of the create %s\nlacks %s", line, want)
			}
		}
	})
	t.Run("templates are warned about, not refused", func(t *testing.T) {
		ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "agent"}, Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "agent"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "agent"}}, Spec: hostPod("x").Spec}}}
		ds.Spec.Template.Spec.NodeName = ""
		_, err := client.AppsV1().DaemonSets("secure").Create(ctx, ds, metav1.CreateOptions{})
		check(t, err)
		// The warn level is the stricter one, so its warning covers the enforced level's too.
		if w := seen.take(); len(w) != 1 || !strings.HasPrefix(w[0], restrictedWarning+"host namespaces (hostNetwork=true), privileged") {
			t.Errorf("warnings %q, want one starting %q", w, restrictedWarning+"host namespaces (hostNetwork=true), privileged")
		}
	})
	t.Run("ephemeral containers", func(t *testing.T) {
		_, err := pods.Patch(ctx, "web", types.StrategicMergePatchType,
			[]byte(`{"spec":{"ephemeralContainers":[{"name":"dbg","image":"busybox","securityContext":{"privileged":true}}]}}`), metav1.PatchOptions{}, "ephemeralcontainers")
		se := expectStatus(t, err, http.StatusForbidden, metav1.StatusReasonForbidden)
		if !strings.Contains(se.ErrStatus.Message, `violates PodSecurity "baseline:latest": privileged (container "dbg" must not set securityContext.privileged=true)`) {
			t.Errorf("message %q", se.ErrStatus.Message)
		}
	})
	t.Run("a stricter level warns of the pods already there", func(t *testing.T) {
		_, err := client.CoreV1().Namespaces().Patch(ctx, "secure", types.MergePatchType,
			[]byte(`{"metadata":{"labels":{"pod-security.kubernetes.io/enforce":"restricted"}}}`), metav1.PatchOptions{})
		check(t, err)
		w := seen.take()
		if !slices.Contains(w, `existing pods in namespace "secure" violate the new PodSecurity enforce level "restricted:latest"`) ||
			!slices.ContainsFunc(w, func(s string) bool { return strings.HasPrefix(s, "web: allowPrivilegeEscalation != false") }) {
			t.Errorf("warnings %q", w)
		}
	})
	t.Run("a bad level", func(t *testing.T) {
		_, err := client.CoreV1().Namespaces().Patch(ctx, "secure", types.MergePatchType,
			[]byte(`{"metadata":{"labels":{"pod-security.kubernetes.io/enforce":"bogus"}}}`), metav1.PatchOptions{})
		se := expectStatus(t, err, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid)
		if !strings.Contains(se.ErrStatus.Message, `metadata.labels[pod-security.kubernetes.io/enforce]: Invalid value: "bogus": must be one of privileged, baseline, restricted`) {
			t.Errorf("message %q", se.ErrStatus.Message)
		}
	})
	t.Run("no labels: privileged", func(t *testing.T) {
		p := hostPod("agent")
		p.Namespace = "default"
		_, err := client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{})
		check(t, err)
		if w := seen.take(); len(w) != 0 {
			t.Errorf("warnings %q", w)
		}
	})
}

// hostPod is a pod on n1 in namespace secure that baseline refuses: host network, privileged.
func hostPod(name string) *corev1.Pod {
	p := podOn("secure", name, "n1")
	p.Spec.HostNetwork = true
	privileged := true
	p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: &privileged}
	return p
}
