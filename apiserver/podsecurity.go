package apiserver

import (
	"context"
	"errors"
	"fmt"
	"maps"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apiserver/pkg/warning"
	psadmission "k8s.io/pod-security-admission/admission"
	psaconfig "k8s.io/pod-security-admission/admission/api/load"
	psaapi "k8s.io/pod-security-admission/api"
	psametrics "k8s.io/pod-security-admission/metrics"
	"k8s.io/pod-security-admission/policy"
)

// The PodSecurity admission plugin, as kube-apiserver enables it by default
// (docs/kinds-and-admission.md, "Pod Security admission"): a namespace's
// pod-security.kubernetes.io/enforce, audit and warn labels name a Pod Security Standard
// (privileged, baseline, restricted) and a version. Pods (and ephemeral containers added to
// them) that break the enforced level are refused with 403; what breaks the warn level comes
// back as warnings, for pods and for the pod templates of workloads (a DaemonSet's among
// them) alike; what breaks the audit level is noted in the audit log. A namespace whose
// enforce label changes is warned of the pods already in it that break the new level. The
// evaluation, its messages and the pods it spends time on are the pod-security-admission
// library's, with its defaults: every level privileged, no exemptions.

// podSecurity holds the library's admission, fed from the server's caches.
type podSecurity struct {
	admission *psadmission.Admission
}

func newPodSecurity(s *Server) (*podSecurity, error) {
	cfg, err := psaconfig.LoadFromData(nil)
	if err != nil {
		return nil, fmt.Errorf("apiserver: pod security defaults: %w", err)
	}
	evaluator, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		return nil, fmt.Errorf("apiserver: pod security checks: %w", err)
	}
	a := &psadmission.Admission{
		Configuration:   cfg,
		Evaluator:       evaluator,
		Metrics:         noPodSecurityMetrics{},
		NamespaceGetter: podSecurityNamespaces{s},
		PodLister:       podSecurityPods{s},
	}
	if err := a.CompleteConfiguration(); err != nil {
		return nil, err
	}
	if err := a.ValidateConfiguration(); err != nil {
		return nil, err
	}
	return &podSecurity{admission: a}, nil
}

// admitPodSecurity is the PodSecurity plugin. It looks at namespaces, pods and the kinds
// with a pod template; deletes never reach it.
func admitPodSecurity(s *Server, ctx context.Context, a *admission) error {
	gr := a.res.groupResource()
	psa := s.podSecurity.admission
	if gr != podsResource && gr != corev1.Resource("namespaces") && !psa.PodSpecExtractor.HasPodSpec(gr) {
		return nil
	}
	op := admissionv1.Create
	if a.op == opUpdate {
		op = admissionv1.Update
	}
	attrs := &psaapi.AttributesRecord{
		Name: a.name, Namespace: a.namespace, Kind: a.res.gvk(), Resource: a.res.gvr(), Subresource: a.subresource,
		Operation: op, Object: a.obj, OldObject: a.old,
	}
	if u := stateFrom(ctx).user; u != nil { // nil for the API server's own writes
		attrs.Username = u.Name
	}
	if a.kind != nil {
		attrs.Kind = *a.kind
	}
	result := psa.Validate(ctx, attrs)
	for _, w := range result.Warnings {
		warning.AddWarning(ctx, "", w)
	}
	if len(result.AuditAnnotations) > 0 {
		// Named as kube-apiserver's plugin names them in the audit event.
		annotations := make(map[string]string, len(result.AuditAnnotations))
		for k, v := range result.AuditAnnotations {
			annotations[psaapi.AuditAnnotationPrefix+k] = v
		}
		stateFrom(ctx).annotate(annotations)
	}
	if result.Allowed {
		return nil
	}
	// kube-apiserver's plugin starts from a generic refusal and takes what the library says.
	refused := a.forbidden(errors.New("Not allowed by PodSecurity"))
	var se *apierrors.StatusError
	if errors.As(refused, &se) && result.Result != nil {
		if result.Result.Message != "" {
			se.ErrStatus.Message = result.Result.Message
		}
		if result.Result.Reason != "" {
			se.ErrStatus.Reason = result.Result.Reason
		}
		if result.Result.Code != 0 {
			se.ErrStatus.Code = result.Result.Code
		}
		se.ErrStatus.Details = result.Result.Details
	}
	return refused
}

// podSecurityNamespaces reads a namespace's labels from the cache (etcd when it lacks it).
type podSecurityNamespaces struct{ s *Server }

func (g podSecurityNamespaces) GetNamespace(ctx context.Context, name string) (*corev1.Namespace, error) {
	obj, err := g.s.lookup(ctx, corev1.Resource("namespaces"), "", name)
	if err != nil {
		return nil, err
	}
	return obj.(*corev1.Namespace), nil
}

// podSecurityPods lists a namespace's pods from the cache, for the warning a new enforce
// level gives about the pods already there.
type podSecurityPods struct{ s *Server }

func (l podSecurityPods) ListPods(_ context.Context, namespace string) ([]*corev1.Pod, error) {
	objs := l.s.cached(podsResource, namespace)
	pods := make([]*corev1.Pod, len(objs))
	for i, o := range objs {
		pods[i] = o.(*corev1.Pod)
	}
	return pods, nil
}

// noPodSecurityMetrics drops the library's evaluation counts: its recorder registers with
// component-base's registry, which /metrics does not serve.
type noPodSecurityMetrics struct{}

func (noPodSecurityMetrics) RecordEvaluation(psametrics.Decision, psaapi.LevelVersion, psametrics.Mode, psaapi.Attributes) {
}
func (noPodSecurityMetrics) RecordExemption(psaapi.Attributes)       {}
func (noPodSecurityMetrics) RecordError(_ bool, _ psaapi.Attributes) {}

// annotate adds audit annotations to the request's audit event.
func (st *requestState) annotate(annotations map[string]string) {
	if len(annotations) == 0 {
		return
	}
	if st.annotations == nil {
		st.annotations = make(map[string]string, len(annotations))
	}
	maps.Copy(st.annotations, annotations)
}
