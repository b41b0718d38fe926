package apiserver_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func TestServiceAccountAdmission(t *testing.T) {
	env := newEnv(t)
	c := env.Client
	ctx := testCtx(t)
	_, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team"}}, metav1.CreateOptions{})
	check(t, err)
	// A pod created right after its namespace runs as the namespace's default account.
	pod, err := c.CoreV1().Pods("team").Create(ctx, podOn("team", "p", ""), metav1.CreateOptions{})
	check(t, err)
	if pod.Spec.ServiceAccountName != "default" {
		t.Errorf("serviceAccountName %q, want default", pod.Spec.ServiceAccountName)
	}
	missing := podOn("team", "q", "")
	missing.Spec.ServiceAccountName = "ghost"
	_, err = c.CoreV1().Pods("team").Create(ctx, missing, metav1.CreateOptions{})
	se := expectStatus(t, err, 403, metav1.StatusReasonForbidden)
	if want := `pods "q" is forbidden: error looking up service account team/ghost: serviceaccounts "ghost" not found`; se.ErrStatus.Message != want {
		t.Errorf("message %q, want %q", se.ErrStatus.Message, want)
	}
}

func TestPriorityAdmission(t *testing.T) {
	env := newEnv(t)
	c := env.Client
	ctx := testCtx(t)
	withClass := func(name, class string) *corev1.Pod {
		p := podOn("default", name, "")
		p.Spec.PriorityClassName = class
		return p
	}
	critical, err := c.CoreV1().Pods("default").Create(ctx, withClass("critical", "system-node-critical"), metav1.CreateOptions{})
	check(t, err)
	if critical.Spec.Priority == nil || *critical.Spec.Priority != 2000001000 || *critical.Spec.PreemptionPolicy != corev1.PreemptLowerPriority {
		t.Errorf("priority %v policy %v, want 2000001000 PreemptLowerPriority", critical.Spec.Priority, critical.Spec.PreemptionPolicy)
	}
	_, err = c.CoreV1().Pods("default").Create(ctx, withClass("lost", "no-such-class"), metav1.CreateOptions{})
	if se := expectStatus(t, err, 403, metav1.StatusReasonForbidden); !strings.Contains(se.ErrStatus.Message, "no PriorityClass with name no-such-class was found") {
		t.Errorf("message %q", se.ErrStatus.Message)
	}
	plain, err := c.CoreV1().Pods("default").Create(ctx, podOn("default", "plain", ""), metav1.CreateOptions{})
	check(t, err)
	if plain.Spec.Priority == nil || *plain.Spec.Priority != 0 || plain.Spec.PriorityClassName != "" {
		t.Errorf("a pod without a class and no default got priority %v class %q", plain.Spec.Priority, plain.Spec.PriorityClassName)
	}

	// A global default applies to pods that name no class; only one may exist.
	_, err = c.SchedulingV1().PriorityClasses().Create(ctx, &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "normal"},
		Value: 100, GlobalDefault: true}, metav1.CreateOptions{})
	check(t, err)
	_, err = c.SchedulingV1().PriorityClasses().Create(ctx, &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "other"},
		Value: 5, GlobalDefault: true}, metav1.CreateOptions{})
	if se := expectStatus(t, err, 403, metav1.StatusReasonForbidden); !strings.Contains(se.ErrStatus.Message, "PriorityClass normal is already marked as default") {
		t.Errorf("message %q", se.ErrStatus.Message)
	}
	defaulted, err := c.CoreV1().Pods("default").Create(ctx, podOn("default", "defaulted", ""), metav1.CreateOptions{})
	check(t, err)
	if *defaulted.Spec.Priority != 100 || defaulted.Spec.PriorityClassName != "normal" {
		t.Errorf("with a global default: priority %d class %q, want 100 normal", *defaulted.Spec.Priority, defaulted.Spec.PriorityClassName)
	}
	fixed := podOn("default", "fixed", "")
	prio := int32(7)
	fixed.Spec.Priority = &prio
	_, err = c.CoreV1().Pods("default").Create(ctx, fixed, metav1.CreateOptions{})
	if se := expectStatus(t, err, 403, metav1.StatusReasonForbidden); !strings.Contains(se.ErrStatus.Message, "the integer value of priority (7) must not be provided in pod spec") {
		t.Errorf("message %q", se.ErrStatus.Message)
	}
}

// TestQuotaConcurrentCreates races many creates against a quota: exactly as many succeed
// as the quota allows, the others get upstream's message, and deletes give room back.
func TestQuotaConcurrentCreates(t *testing.T) {
	env := newEnv(t)
	c := env.Client
	ctx := testCtx(t)
	const ns, limit, tries = "default", 5, 30
	_, err := c.CoreV1().ResourceQuotas(ns).Create(ctx, &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "q"},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse(fmt.Sprint(limit)),
			"count/configmaps": resource.MustParse("1")}}}, metav1.CreateOptions{})
	check(t, err)

	var wg sync.WaitGroup
	var mu sync.Mutex
	created, refused := 0, 0
	for i := 0; i < tries; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			_, err := c.CoreV1().Pods(ns).Create(ctx, podOn(ns, fmt.Sprintf("p%d", i), ""), metav1.CreateOptions{})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				created++
			case apierrors.IsForbidden(err) && strings.Contains(err.Error(), fmt.Sprintf("exceeded quota: q, requested: pods=1, used: pods=%d, limited: pods=%d", limit, limit)):
				refused++
			default:
				t.Errorf("create p%d: %v", i, err)
			}
		}(i)
	}
	wg.Wait()
	if created != limit || refused != tries-limit {
		t.Fatalf("%d created and %d refused, want %d and %d", created, refused, limit, tries-limit)
	}
	pods, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	check(t, err)
	if len(pods.Items) != limit {
		t.Fatalf("%d pods stored, want %d", len(pods.Items), limit)
	}

	// count/<resource> quotas too.
	_, err = c.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "one"}}, metav1.CreateOptions{})
	check(t, err)
	_, err = c.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "two"}}, metav1.CreateOptions{})
	expectStatus(t, err, 403, metav1.StatusReasonForbidden)

	// Deleting two pods gives their share back: status.used follows and two more fit.
	check(t, c.CoreV1().Pods(ns).Delete(ctx, pods.Items[0].Name, metav1.DeleteOptions{}))
	check(t, c.CoreV1().Pods(ns).Delete(ctx, pods.Items[1].Name, metav1.DeleteOptions{}))
	eventually(t, "quota usage to drop to 3 pods", func() (bool, error) {
		q, err := c.CoreV1().ResourceQuotas(ns).Get(ctx, "q", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		used := q.Status.Used[corev1.ResourcePods]
		return used.Value() == limit-2, fmt.Errorf("used %s", used.String())
	})
	for _, name := range []string{"x1", "x2"} {
		_, err := c.CoreV1().Pods(ns).Create(ctx, podOn(ns, name, ""), metav1.CreateOptions{})
		check(t, err)
	}
	_, err = c.CoreV1().Pods(ns).Create(ctx, podOn(ns, "x3", ""), metav1.CreateOptions{})
	expectStatus(t, err, 403, metav1.StatusReasonForbidden)
}

func TestQuotaRequiresComputeResources(t *testing.T) {
	env := newEnv(t)
	c := env.Client
	ctx := testCtx(t)
	_, err := c.CoreV1().ResourceQuotas("default").Create(ctx, &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "compute"},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{"requests.cpu": resource.MustParse("1")}}}, metav1.CreateOptions{})
	check(t, err)
	_, err = c.CoreV1().Pods("default").Create(ctx, podOn("default", "bare", ""), metav1.CreateOptions{})
	if se := expectStatus(t, err, 403, metav1.StatusReasonForbidden); !strings.Contains(se.ErrStatus.Message, "failed quota: compute: must specify requests.cpu") {
		t.Errorf("message %q", se.ErrStatus.Message)
	}
	sized := func(name, cpu string) *corev1.Pod {
		p := podOn("default", name, "")
		p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}
		return p
	}
	_, err = c.CoreV1().Pods("default").Create(ctx, sized("small", "600m"), metav1.CreateOptions{})
	check(t, err)
	_, err = c.CoreV1().Pods("default").Create(ctx, sized("large", "500m"), metav1.CreateOptions{})
	if se := expectStatus(t, err, 403, metav1.StatusReasonForbidden); !strings.Contains(se.ErrStatus.Message,
		"exceeded quota: compute, requested: requests.cpu=500m, used: requests.cpu=600m, limited: requests.cpu=1") {
		t.Errorf("message %q", se.ErrStatus.Message)
	}
}

// TestEviction evicts pods under a disruption budget: refused with 429 while the budget
// allows no disruption, done (and spent) once it does.
func TestEviction(t *testing.T) {
	env := newEnv(t)
	c := env.Client
	ctx := testCtx(t)
	const ns = "default"
	for _, name := range []string{"a", "b"} {
		p, err := c.CoreV1().Pods(ns).Create(ctx, podOn(ns, name, "n1"), metav1.CreateOptions{})
		check(t, err)
		p.Status.Phase = corev1.PodRunning
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		_, err = c.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
		check(t, err)
	}
	one := intstr.FromInt32(1)
	_, err := c.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: &one, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}}, metav1.CreateOptions{})
	check(t, err)
	eventually(t, "the budget's status", func() (bool, error) {
		b, err := c.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		st := b.Status
		return st.ObservedGeneration == b.Generation && st.CurrentHealthy == 2 && st.DesiredHealthy == 1 && st.ExpectedPods == 2 && st.DisruptionsAllowed == 1,
			fmt.Errorf("status %+v", st)
	})
	evict := func(name string) error {
		return c.PolicyV1().Evictions(ns).Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}})
	}
	check(t, evict("a"))
	err = evict("b")
	se := expectStatus(t, err, 429, metav1.StatusReasonTooManyRequests)
	if se.ErrStatus.Message != "Cannot evict pod as it would violate the pod's disruption budget." ||
		len(se.ErrStatus.Details.Causes) != 1 || se.ErrStatus.Details.Causes[0].Type != policyv1.DisruptionBudgetCause {
		t.Errorf("refusal %+v", se.ErrStatus)
	}
	// Pod a is being deleted (bound pods wait for their kubelet); b stays.
	a, err := c.CoreV1().Pods(ns).Get(ctx, "a", metav1.GetOptions{})
	if err == nil && a.DeletionTimestamp == nil {
		t.Errorf("evicted pod a is not being deleted")
	}
	b, err := c.CoreV1().Pods(ns).Get(ctx, "b", metav1.GetOptions{})
	check(t, err)
	if b.DeletionTimestamp != nil {
		t.Errorf("pod b was deleted although its budget forbade it")
	}
	_, err = c.CoreV1().Pods(ns).Get(ctx, "ghost", metav1.GetOptions{})
	if !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	expectStatus(t, evict("ghost"), 404, metav1.StatusReasonNotFound)
}
