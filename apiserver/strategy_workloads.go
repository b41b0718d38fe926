package apiserver

import (
	"fmt"
	"math"
	"strings"
	"time"

	// CronJob time zones are checked against the IANA database, which a FROM scratch
	// image does not have on disk.
	_ "time/tzdata"

	"github.com/robfig/cron/v3"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Deployments, ReplicaSets, StatefulSets, ReplicationControllers, Jobs and CronJobs are stored and served with
// kube-apiserver's defaults and validation, but miniplane runs no controller for them: the
// API server says so with an event on each new one (see resource.notRunBy).

func int32Ptr(v int32) *int32 { return &v }

// validatePodTemplate checks a workload's pod template and that selector matches it;
// restartPolicies are the restart policies the kind allows.
func validatePodTemplate(tmpl *corev1.PodTemplateSpec, selector *metav1.LabelSelector, p *field.Path, restartPolicies ...corev1.RestartPolicy) field.ErrorList {
	var errs field.ErrorList
	tp := p.Child("template")
	if selector != nil {
		if s, err := metav1.LabelSelectorAsSelector(selector); err == nil && !s.Matches(labels.Set(tmpl.Labels)) {
			errs = append(errs, field.Invalid(tp.Child("metadata", "labels"), tmpl.Labels, "`selector` does not match template `labels`"))
		}
	}
	errs = append(errs, metav1validation.ValidateLabels(tmpl.Labels, tp.Child("metadata", "labels"))...)
	errs = append(errs, apivalidation.ValidateAnnotations(tmpl.Annotations, tp.Child("metadata", "annotations"))...)
	errs = append(errs, validateTemplateSpec(&tmpl.Spec, tp.Child("spec"))...)
	allowed := false
	names := make([]string, len(restartPolicies))
	for i, rp := range restartPolicies {
		allowed = allowed || tmpl.Spec.RestartPolicy == rp
		names[i] = string(rp)
	}
	if !allowed {
		errs = append(errs, field.NotSupported(tp.Child("spec", "restartPolicy"), tmpl.Spec.RestartPolicy, names))
	}
	return errs
}

// validateWorkloadSelector requires a non-empty, valid selector.
func validateWorkloadSelector(selector *metav1.LabelSelector, p *field.Path, kind string) field.ErrorList {
	if selector == nil {
		return field.ErrorList{field.Required(p, "")}
	}
	errs := metav1validation.ValidateLabelSelector(selector, metav1validation.LabelSelectorValidationOptions{}, p)
	if len(selector.MatchLabels)+len(selector.MatchExpressions) == 0 {
		errs = append(errs, field.Invalid(p, selector, "empty selector is invalid for "+kind))
	}
	return errs
}

func nonNegative(v *int32, p *field.Path) field.ErrorList {
	if v == nil {
		return nil
	}
	return apivalidation.ValidateNonnegativeField(int64(*v), p)
}

func selectorImmutable(sel, old *metav1.LabelSelector) field.ErrorList {
	return immutable(!apiequality.Semantic.DeepEqual(sel, old), sel, field.NewPath("spec", "selector"))
}

var deploymentRules = kindRules[*appsv1.Deployment]{
	hasStatus: true,
	// As kube-apiserver's deployment status strategy: the labels are the spec's business.
	onStatusUpdate: func(d, old *appsv1.Deployment) { d.Labels = old.Labels },
	defaults: func(d *appsv1.Deployment) {
		spec := &d.Spec
		if spec.Replicas == nil {
			spec.Replicas = int32Ptr(1)
		}
		if spec.Strategy.Type == "" {
			spec.Strategy.Type = appsv1.RollingUpdateDeploymentStrategyType
		}
		if spec.Strategy.Type == appsv1.RollingUpdateDeploymentStrategyType {
			if spec.Strategy.RollingUpdate == nil {
				spec.Strategy.RollingUpdate = &appsv1.RollingUpdateDeployment{}
			}
			quarter := intstr.FromString("25%")
			if spec.Strategy.RollingUpdate.MaxUnavailable == nil {
				spec.Strategy.RollingUpdate.MaxUnavailable = &quarter
			}
			if spec.Strategy.RollingUpdate.MaxSurge == nil {
				surge := quarter
				spec.Strategy.RollingUpdate.MaxSurge = &surge
			}
		}
		if spec.RevisionHistoryLimit == nil {
			spec.RevisionHistoryLimit = int32Ptr(10)
		}
		if spec.ProgressDeadlineSeconds == nil {
			spec.ProgressDeadlineSeconds = int32Ptr(600)
		}
		defaultPodSpec(&spec.Template.Spec)
	},
	check: func(d *appsv1.Deployment) field.ErrorList {
		spec := &d.Spec
		p := field.NewPath("spec")
		errs := nonNegative(spec.Replicas, p.Child("replicas"))
		errs = append(errs, validateWorkloadSelector(spec.Selector, p.Child("selector"), "deployment")...)
		errs = append(errs, validatePodTemplate(&spec.Template, spec.Selector, p, corev1.RestartPolicyAlways)...)
		sp := p.Child("strategy")
		switch spec.Strategy.Type {
		case appsv1.RecreateDeploymentStrategyType:
			if spec.Strategy.RollingUpdate != nil {
				errs = append(errs, field.Forbidden(sp.Child("rollingUpdate"), "may not be specified when strategy `type` is 'Recreate'"))
			}
		case appsv1.RollingUpdateDeploymentStrategyType:
			ru := spec.Strategy.RollingUpdate
			rp := sp.Child("rollingUpdate")
			if ru == nil {
				errs = append(errs, field.Required(rp, "this should be defaulted and never be nil"))
				break
			}
			errs = append(errs, validateIntOrPercent(ru.MaxUnavailable, rp.Child("maxUnavailable"))...)
			errs = append(errs, validateIntOrPercent(ru.MaxSurge, rp.Child("maxSurge"))...)
			if isZeroIntOrPercent(ru.MaxUnavailable) && isZeroIntOrPercent(ru.MaxSurge) {
				errs = append(errs, field.Invalid(rp.Child("maxUnavailable"), ru.MaxUnavailable.String(), "may not be 0 when `maxSurge` is 0"))
			}
		default:
			errs = append(errs, field.NotSupported(sp.Child("type"), spec.Strategy.Type, []string{"Recreate", "RollingUpdate"}))
		}
		errs = append(errs, apivalidation.ValidateNonnegativeField(int64(spec.MinReadySeconds), p.Child("minReadySeconds"))...)
		errs = append(errs, nonNegative(spec.RevisionHistoryLimit, p.Child("revisionHistoryLimit"))...)
		if pds := spec.ProgressDeadlineSeconds; pds != nil {
			errs = append(errs, nonNegative(pds, p.Child("progressDeadlineSeconds"))...)
			if *pds <= spec.MinReadySeconds {
				errs = append(errs, field.Invalid(p.Child("progressDeadlineSeconds"), *pds, "must be greater than minReadySeconds"))
			}
		}
		return errs
	},
	checkUpdate: func(d, old *appsv1.Deployment) field.ErrorList {
		return selectorImmutable(d.Spec.Selector, old.Spec.Selector)
	},
	columns: []metav1.TableColumnDefinition{nameColumn(),
		{Name: "Ready", Type: "string", Description: "Number of the pod with ready state"},
		{Name: "Up-to-date", Type: "integer", Description: "Total number of non-terminated pods targeted by this deployment that have the desired template spec."},
		{Name: "Available", Type: "integer", Description: "Total number of available pods (ready for at least minReadySeconds) targeted by this deployment."},
		ageColumn(),
		{Name: "Containers", Type: "string", Priority: 1, Description: "Names of each container in the template."},
		{Name: "Images", Type: "string", Priority: 1, Description: "Images referenced by each container in the template."},
		{Name: "Selector", Type: "string", Priority: 1, Description: "Label selector for pods."},
	},
	row: func(d *appsv1.Deployment, now time.Time) []any {
		names, images := containersAndImages(&d.Spec.Template.Spec)
		return []any{d.Name, fmt.Sprintf("%d/%d", d.Status.ReadyReplicas, replicasOf(d.Spec.Replicas)),
			int64(d.Status.UpdatedReplicas), int64(d.Status.AvailableReplicas), age(d.CreationTimestamp, now),
			names, images, selectorText(d.Spec.Selector)}
	},
}

var replicaSetRules = kindRules[*appsv1.ReplicaSet]{
	hasStatus: true,
	defaults: func(rs *appsv1.ReplicaSet) {
		if rs.Spec.Replicas == nil {
			rs.Spec.Replicas = int32Ptr(1)
		}
		defaultPodSpec(&rs.Spec.Template.Spec)
	},
	check: func(rs *appsv1.ReplicaSet) field.ErrorList {
		p := field.NewPath("spec")
		errs := nonNegative(rs.Spec.Replicas, p.Child("replicas"))
		errs = append(errs, validateWorkloadSelector(rs.Spec.Selector, p.Child("selector"), "deployment")...)
		errs = append(errs, validatePodTemplate(&rs.Spec.Template, rs.Spec.Selector, p, corev1.RestartPolicyAlways)...)
		errs = append(errs, apivalidation.ValidateNonnegativeField(int64(rs.Spec.MinReadySeconds), p.Child("minReadySeconds"))...)
		return errs
	},
	checkUpdate: func(rs, old *appsv1.ReplicaSet) field.ErrorList {
		return selectorImmutable(rs.Spec.Selector, old.Spec.Selector)
	},
	columns: []metav1.TableColumnDefinition{nameColumn(),
		{Name: "Desired", Type: "integer", Description: "Replicas is the number of desired pods."},
		{Name: "Current", Type: "integer", Description: "Replicas is the most recently observed number of non-terminating pods."},
		{Name: "Ready", Type: "integer", Description: "The number of non-terminating pods targeted by this ReplicaSet with a Ready Condition."},
		ageColumn(),
		{Name: "Containers", Type: "string", Priority: 1, Description: "Names of each container in the template."},
		{Name: "Images", Type: "string", Priority: 1, Description: "Images referenced by each container in the template."},
		{Name: "Selector", Type: "string", Priority: 1, Description: "Selector is a label query over pods that should match the replica count."},
	},
	row: func(rs *appsv1.ReplicaSet, now time.Time) []any {
		names, images := containersAndImages(&rs.Spec.Template.Spec)
		return []any{rs.Name, int64(replicasOf(rs.Spec.Replicas)), int64(rs.Status.Replicas), int64(rs.Status.ReadyReplicas),
			age(rs.CreationTimestamp, now), names, images, selectorText(rs.Spec.Selector)}
	},
}

var statefulSetRules = kindRules[*appsv1.StatefulSet]{
	hasStatus: true,
	defaults: func(ss *appsv1.StatefulSet) {
		spec := &ss.Spec
		if spec.PodManagementPolicy == "" {
			spec.PodManagementPolicy = appsv1.OrderedReadyPodManagement
		}
		if spec.UpdateStrategy.Type == "" {
			spec.UpdateStrategy.Type = appsv1.RollingUpdateStatefulSetStrategyType
		}
		if spec.UpdateStrategy.Type == appsv1.RollingUpdateStatefulSetStrategyType {
			if spec.UpdateStrategy.RollingUpdate == nil {
				spec.UpdateStrategy.RollingUpdate = &appsv1.RollingUpdateStatefulSetStrategy{}
			}
			if spec.UpdateStrategy.RollingUpdate.Partition == nil {
				spec.UpdateStrategy.RollingUpdate.Partition = int32Ptr(0)
			}
		}
		if spec.PersistentVolumeClaimRetentionPolicy == nil {
			spec.PersistentVolumeClaimRetentionPolicy = &appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy{}
		}
		if spec.PersistentVolumeClaimRetentionPolicy.WhenDeleted == "" {
			spec.PersistentVolumeClaimRetentionPolicy.WhenDeleted = appsv1.RetainPersistentVolumeClaimRetentionPolicyType
		}
		if spec.PersistentVolumeClaimRetentionPolicy.WhenScaled == "" {
			spec.PersistentVolumeClaimRetentionPolicy.WhenScaled = appsv1.RetainPersistentVolumeClaimRetentionPolicyType
		}
		if spec.Replicas == nil {
			spec.Replicas = int32Ptr(1)
		}
		if spec.RevisionHistoryLimit == nil {
			spec.RevisionHistoryLimit = int32Ptr(10)
		}
		for i := range spec.VolumeClaimTemplates {
			pvc := &spec.VolumeClaimTemplates[i]
			if pvc.Spec.VolumeMode == nil {
				fs := corev1.PersistentVolumeFilesystem
				pvc.Spec.VolumeMode = &fs
			}
			if pvc.Status.Phase == "" {
				pvc.Status.Phase = corev1.ClaimPending
			}
		}
		defaultPodSpec(&spec.Template.Spec)
	},
	check: func(ss *appsv1.StatefulSet) field.ErrorList {
		spec := &ss.Spec
		p := field.NewPath("spec")
		errs := nonNegative(spec.Replicas, p.Child("replicas"))
		errs = append(errs, validateWorkloadSelector(spec.Selector, p.Child("selector"), "statefulset")...)
		errs = append(errs, validatePodTemplate(&spec.Template, spec.Selector, p, corev1.RestartPolicyAlways)...)
		switch spec.PodManagementPolicy {
		case appsv1.OrderedReadyPodManagement, appsv1.ParallelPodManagement:
		default:
			errs = append(errs, field.Invalid(p.Child("podManagementPolicy"), spec.PodManagementPolicy,
				fmt.Sprintf("must be '%s' or '%s'", appsv1.OrderedReadyPodManagement, appsv1.ParallelPodManagement)))
		}
		switch spec.UpdateStrategy.Type {
		case appsv1.OnDeleteStatefulSetStrategyType:
			if spec.UpdateStrategy.RollingUpdate != nil {
				errs = append(errs, field.Invalid(p.Child("updateStrategy", "rollingUpdate"), spec.UpdateStrategy.RollingUpdate,
					fmt.Sprintf("only allowed for updateStrategy '%s'", appsv1.RollingUpdateStatefulSetStrategyType)))
			}
		case appsv1.RollingUpdateStatefulSetStrategyType:
			if ru := spec.UpdateStrategy.RollingUpdate; ru != nil {
				errs = append(errs, nonNegative(ru.Partition, p.Child("updateStrategy", "rollingUpdate", "partition"))...)
			}
		default:
			errs = append(errs, field.Invalid(p.Child("updateStrategy"), spec.UpdateStrategy,
				fmt.Sprintf("must be '%s' or '%s'", appsv1.RollingUpdateStatefulSetStrategyType, appsv1.OnDeleteStatefulSetStrategyType)))
		}
		errs = append(errs, apivalidation.ValidateNonnegativeField(int64(spec.MinReadySeconds), p.Child("minReadySeconds"))...)
		return errs
	},
	checkUpdate: func(ss, old *appsv1.StatefulSet) field.ErrorList {
		// Only these may change; everything else of the spec is fixed at creation.
		a, b := ss.Spec.DeepCopy(), old.Spec.DeepCopy()
		a.Replicas, a.Ordinals, a.Template, a.UpdateStrategy = b.Replicas, b.Ordinals, b.Template, b.UpdateStrategy
		a.PersistentVolumeClaimRetentionPolicy, a.MinReadySeconds = b.PersistentVolumeClaimRetentionPolicy, b.MinReadySeconds
		if !apiequality.Semantic.DeepEqual(a, b) {
			return field.ErrorList{field.Forbidden(field.NewPath("spec"), "updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden")}
		}
		return nil
	},
	columns: []metav1.TableColumnDefinition{nameColumn(),
		{Name: "Ready", Type: "string", Description: "Number of the pod with ready state"},
		ageColumn(),
		{Name: "Containers", Type: "string", Priority: 1, Description: "Names of each container in the template."},
		{Name: "Images", Type: "string", Priority: 1, Description: "Images referenced by each container in the template."},
	},
	row: func(ss *appsv1.StatefulSet, now time.Time) []any {
		names, images := containersAndImages(&ss.Spec.Template.Spec)
		return []any{ss.Name, fmt.Sprintf("%d/%d", ss.Status.ReadyReplicas, replicasOf(ss.Spec.Replicas)),
			age(ss.CreationTimestamp, now), names, images}
	},
}

// Labels the API server puts on a Job's pods and its generated selector.
const (
	jobControllerUIDLabel       = "batch.kubernetes.io/controller-uid"
	jobNameLabel                = "batch.kubernetes.io/job-name"
	legacyJobControllerUIDLabel = "controller-uid"
	legacyJobNameLabel          = "job-name"
)

func defaultJobSpec(spec *batchv1.JobSpec) {
	if spec.Completions == nil && spec.Parallelism == nil {
		spec.Completions, spec.Parallelism = int32Ptr(1), int32Ptr(1)
	}
	if spec.Parallelism == nil {
		spec.Parallelism = int32Ptr(1)
	}
	if spec.BackoffLimit == nil {
		if spec.BackoffLimitPerIndex != nil {
			spec.BackoffLimit = int32Ptr(math.MaxInt32)
		} else {
			spec.BackoffLimit = int32Ptr(6)
		}
	}
	if spec.CompletionMode == nil {
		m := batchv1.NonIndexedCompletion
		spec.CompletionMode = &m
	}
	if spec.Suspend == nil {
		f := false
		spec.Suspend = &f
	}
	if spec.PodReplacementPolicy == nil {
		p := batchv1.TerminatingOrFailed
		if spec.PodFailurePolicy != nil {
			p = batchv1.Failed
		}
		spec.PodReplacementPolicy = &p
	}
	defaultPodSpec(&spec.Template.Spec)
}

// generateJobSelector gives a Job without a manual selector the selector and pod labels
// kube-apiserver generates from its UID.
func generateJobSelector(job *batchv1.Job) {
	if job.Spec.ManualSelector != nil && *job.Spec.ManualSelector {
		return
	}
	uid := string(job.UID)
	if job.Spec.Template.Labels == nil {
		job.Spec.Template.Labels = map[string]string{}
	}
	for k, v := range map[string]string{jobControllerUIDLabel: uid, jobNameLabel: job.Name,
		legacyJobControllerUIDLabel: uid, legacyJobNameLabel: job.Name} {
		if _, set := job.Spec.Template.Labels[k]; !set {
			job.Spec.Template.Labels[k] = v
		}
	}
	if job.Spec.Selector == nil {
		job.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{jobControllerUIDLabel: uid}}
	}
}

func validateJobSpec(spec *batchv1.JobSpec, p *field.Path, templateOnly bool) field.ErrorList {
	var errs field.ErrorList
	errs = append(errs, nonNegative(spec.Parallelism, p.Child("parallelism"))...)
	errs = append(errs, nonNegative(spec.Completions, p.Child("completions"))...)
	errs = append(errs, nonNegative(spec.BackoffLimit, p.Child("backoffLimit"))...)
	if spec.ActiveDeadlineSeconds != nil && *spec.ActiveDeadlineSeconds <= 0 {
		errs = append(errs, field.Invalid(p.Child("activeDeadlineSeconds"), *spec.ActiveDeadlineSeconds, "must be greater than 0"))
	}
	if spec.TTLSecondsAfterFinished != nil {
		errs = append(errs, apivalidation.ValidateNonnegativeField(int64(*spec.TTLSecondsAfterFinished), p.Child("ttlSecondsAfterFinished"))...)
	}
	if m := spec.CompletionMode; m != nil && *m != batchv1.NonIndexedCompletion && *m != batchv1.IndexedCompletion {
		errs = append(errs, field.NotSupported(p.Child("completionMode"), *m, []string{string(batchv1.IndexedCompletion), string(batchv1.NonIndexedCompletion)}))
	}
	manual := spec.ManualSelector != nil && *spec.ManualSelector
	switch {
	case templateOnly && spec.Selector != nil && !manual:
		errs = append(errs, field.Invalid(p.Child("selector"), spec.Selector, "`selector` will be auto-generated"))
	case !templateOnly:
		errs = append(errs, validateWorkloadSelector(spec.Selector, p.Child("selector"), "job")...)
	}
	selector := spec.Selector
	if templateOnly {
		selector = nil
	}
	errs = append(errs, validatePodTemplate(&spec.Template, selector, p, corev1.RestartPolicyOnFailure, corev1.RestartPolicyNever)...)
	return errs
}

var jobRules = kindRules[*batchv1.Job]{
	hasStatus: true,
	defaults:  func(job *batchv1.Job) { defaultJobSpec(&job.Spec) },
	onCreate:  func(job *batchv1.Job, _ time.Time) { generateJobSelector(job) },
	check: func(job *batchv1.Job) field.ErrorList {
		return validateJobSpec(&job.Spec, field.NewPath("spec"), false)
	},
	checkUpdate: func(job, old *batchv1.Job) field.ErrorList {
		p := field.NewPath("spec")
		errs := selectorImmutable(job.Spec.Selector, old.Spec.Selector)
		errs = append(errs, immutable(!apiequality.Semantic.DeepEqual(job.Spec.Template, old.Spec.Template), job.Spec.Template, p.Child("template"))...)
		errs = append(errs, immutable(!apiequality.Semantic.DeepEqual(job.Spec.CompletionMode, old.Spec.CompletionMode), job.Spec.CompletionMode, p.Child("completionMode"))...)
		if old.Spec.CompletionMode == nil || *old.Spec.CompletionMode == batchv1.NonIndexedCompletion {
			errs = append(errs, immutable(!apiequality.Semantic.DeepEqual(job.Spec.Completions, old.Spec.Completions), job.Spec.Completions, p.Child("completions"))...)
		}
		return errs
	},
	columns: []metav1.TableColumnDefinition{nameColumn(),
		{Name: "Status", Type: "string", Description: "Status of the job."},
		{Name: "Completions", Type: "string", Description: "The desired number of successfully finished pods the job should be run with."},
		{Name: "Duration", Type: "string", Description: "Time required to complete the job."},
		ageColumn(),
		{Name: "Containers", Type: "string", Priority: 1, Description: "Names of each container in the template."},
		{Name: "Images", Type: "string", Priority: 1, Description: "Images referenced by each container in the template."},
		{Name: "Selector", Type: "string", Priority: 1, Description: "A label query over pods that should match the pod count."},
	},
	row: func(job *batchv1.Job, now time.Time) []any {
		names, images := containersAndImages(&job.Spec.Template.Spec)
		completions := fmt.Sprintf("%d/1 of %d", job.Status.Succeeded, replicasOf(job.Spec.Parallelism))
		if job.Spec.Completions != nil {
			completions = fmt.Sprintf("%d/%d", job.Status.Succeeded, *job.Spec.Completions)
		}
		status := "Running"
		if job.Spec.Suspend != nil && *job.Spec.Suspend {
			status = "Suspended"
		}
		for _, c := range job.Status.Conditions {
			if c.Status == corev1.ConditionTrue && (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) {
				status = string(c.Type)
			}
		}
		jobDuration := ""
		if job.Status.StartTime != nil {
			end := now
			if job.Status.CompletionTime != nil {
				end = job.Status.CompletionTime.Time
			}
			jobDuration = duration.HumanDuration(end.Sub(job.Status.StartTime.Time))
		}
		return []any{job.Name, status, completions, jobDuration, age(job.CreationTimestamp, now), names, images, selectorText(job.Spec.Selector)}
	},
}

// maxCronJobNameLength leaves room for the 11-character suffix of the Jobs it would create.
const maxCronJobNameLength = 52

var cronJobRules = kindRules[*batchv1.CronJob]{
	hasStatus: true,
	defaults: func(cj *batchv1.CronJob) {
		spec := &cj.Spec
		if spec.ConcurrencyPolicy == "" {
			spec.ConcurrencyPolicy = batchv1.AllowConcurrent
		}
		if spec.Suspend == nil {
			f := false
			spec.Suspend = &f
		}
		if spec.SuccessfulJobsHistoryLimit == nil {
			spec.SuccessfulJobsHistoryLimit = int32Ptr(3)
		}
		if spec.FailedJobsHistoryLimit == nil {
			spec.FailedJobsHistoryLimit = int32Ptr(1)
		}
		defaultPodSpec(&spec.JobTemplate.Spec.Template.Spec)
	},
	check: func(cj *batchv1.CronJob) field.ErrorList {
		p := field.NewPath("spec")
		var errs field.ErrorList
		if len(cj.Name) > maxCronJobNameLength {
			errs = append(errs, field.Invalid(field.NewPath("metadata", "name"), cj.Name, fmt.Sprintf("must be no more than %d characters", maxCronJobNameLength)))
		}
		switch {
		case cj.Spec.Schedule == "":
			errs = append(errs, field.Required(p.Child("schedule"), ""))
		case strings.Contains(cj.Spec.Schedule, "TZ=") && cj.Spec.TimeZone != nil:
			errs = append(errs, field.Invalid(p.Child("schedule"), cj.Spec.Schedule, "cannot use both timeZone field and TZ or CRON_TZ in schedule"))
		default:
			if _, err := cron.ParseStandard(cj.Spec.Schedule); err != nil {
				errs = append(errs, field.Invalid(p.Child("schedule"), cj.Spec.Schedule, err.Error()))
			}
		}
		if tz := cj.Spec.TimeZone; tz != nil {
			if _, err := time.LoadLocation(*tz); err != nil || *tz == "" || strings.EqualFold(*tz, "local") {
				errs = append(errs, field.Invalid(p.Child("timeZone"), *tz, "unknown time zone "+*tz))
			}
		}
		switch cj.Spec.ConcurrencyPolicy {
		case batchv1.AllowConcurrent, batchv1.ForbidConcurrent, batchv1.ReplaceConcurrent:
		default:
			errs = append(errs, field.NotSupported(p.Child("concurrencyPolicy"), cj.Spec.ConcurrencyPolicy, []string{"Allow", "Forbid", "Replace"}))
		}
		if cj.Spec.StartingDeadlineSeconds != nil {
			errs = append(errs, apivalidation.ValidateNonnegativeField(*cj.Spec.StartingDeadlineSeconds, p.Child("startingDeadlineSeconds"))...)
		}
		errs = append(errs, nonNegative(cj.Spec.SuccessfulJobsHistoryLimit, p.Child("successfulJobsHistoryLimit"))...)
		errs = append(errs, nonNegative(cj.Spec.FailedJobsHistoryLimit, p.Child("failedJobsHistoryLimit"))...)
		errs = append(errs, validateJobSpec(&cj.Spec.JobTemplate.Spec, p.Child("jobTemplate", "spec"), true)...)
		return errs
	},
	columns: []metav1.TableColumnDefinition{nameColumn(),
		{Name: "Schedule", Type: "string", Description: "The schedule in Cron format."},
		{Name: "Timezone", Type: "string", Description: "The time zone name for the given schedule."},
		{Name: "Suspend", Type: "boolean", Description: "This flag tells the controller to suspend subsequent executions."},
		{Name: "Active", Type: "integer", Description: "A list of pointers to currently running jobs."},
		{Name: "Last Schedule", Type: "string", Description: "Information when was the last time the job was successfully scheduled."},
		ageColumn(),
		{Name: "Containers", Type: "string", Priority: 1, Description: "Names of each container in the template."},
		{Name: "Images", Type: "string", Priority: 1, Description: "Images referenced by each container in the template."},
		{Name: "Selector", Type: "string", Priority: 1, Description: "A label query over pods that should match the pod count."},
	},
	row: func(cj *batchv1.CronJob, now time.Time) []any {
		names, images := containersAndImages(&cj.Spec.JobTemplate.Spec.Template.Spec)
		tz := "<none>"
		if cj.Spec.TimeZone != nil {
			tz = *cj.Spec.TimeZone
		}
		last := "<none>"
		if cj.Status.LastScheduleTime != nil {
			last = age(*cj.Status.LastScheduleTime, now)
		}
		return []any{cj.Name, cj.Spec.Schedule, tz, cj.Spec.Suspend != nil && *cj.Spec.Suspend, int64(len(cj.Status.Active)),
			last, age(cj.CreationTimestamp, now), names, images, selectorText(cj.Spec.JobTemplate.Spec.Selector)}
	},
}

func containersAndImages(spec *corev1.PodSpec) (string, string) {
	var names, images []string
	for _, c := range spec.Containers {
		names, images = append(names, c.Name), append(images, c.Image)
	}
	return strings.Join(names, ","), strings.Join(images, ",")
}

func replicasOf(r *int32) int32 {
	if r == nil {
		return 1
	}
	return *r
}

func selectorText(s *metav1.LabelSelector) string {
	if sel, err := metav1.LabelSelectorAsSelector(s); err == nil && s != nil && !sel.Empty() {
		return sel.String()
	}
	return "<none>"
}

// replicationControllerRules: a ReplicationController is stored with its defaults and
// validation; miniplane runs no controller for it.
var replicationControllerRules = kindRules[*corev1.ReplicationController]{
	hasStatus: true,
	defaults: func(rc *corev1.ReplicationController) {
		if t := rc.Spec.Template; t != nil {
			// SetDefaults_ReplicationController: the selector and the labels default to the
			// template's labels.
			if len(rc.Spec.Selector) == 0 {
				rc.Spec.Selector = t.Labels
			}
			if len(rc.Labels) == 0 {
				rc.Labels = t.Labels
			}
			defaultPodSpec(&t.Spec)
		}
		if rc.Spec.Replicas == nil {
			rc.Spec.Replicas = int32Ptr(1)
		}
	},
	check: func(rc *corev1.ReplicationController) field.ErrorList {
		p := field.NewPath("spec")
		errs := nonNegative(rc.Spec.Replicas, p.Child("replicas"))
		errs = append(errs, apivalidation.ValidateNonnegativeField(int64(rc.Spec.MinReadySeconds), p.Child("minReadySeconds"))...)
		if len(rc.Spec.Selector) == 0 {
			errs = append(errs, field.Required(p.Child("selector"), ""))
		} else {
			errs = append(errs, metav1validation.ValidateLabels(rc.Spec.Selector, p.Child("selector"))...)
		}
		if rc.Spec.Template == nil {
			return append(errs, field.Required(p.Child("template"), ""))
		}
		return append(errs, validatePodTemplate(rc.Spec.Template, rcSelector(rc), p, corev1.RestartPolicyAlways)...)
	},
	columns: []metav1.TableColumnDefinition{nameColumn(),
		{Name: "Desired", Type: "integer", Description: "Replicas is the number of desired replicas."},
		{Name: "Current", Type: "integer", Description: "Replicas is the most recently observed number of replicas."},
		{Name: "Ready", Type: "integer", Description: "The number of ready replicas for this replication controller."},
		ageColumn(),
		{Name: "Containers", Type: "string", Priority: 1, Description: "Names of each container in the template."},
		{Name: "Images", Type: "string", Priority: 1, Description: "Images referenced by each container in the template."},
		{Name: "Selector", Type: "string", Priority: 1, Description: "Selector is a label query over pods that should match the replica count."},
	},
	row: func(rc *corev1.ReplicationController, now time.Time) []any {
		names, images := "", ""
		if rc.Spec.Template != nil {
			names, images = containersAndImages(&rc.Spec.Template.Spec)
		}
		return []any{rc.Name, int64(replicasOf(rc.Spec.Replicas)), int64(rc.Status.Replicas), int64(rc.Status.ReadyReplicas),
			age(rc.CreationTimestamp, now), names, images, selectorText(rcSelector(rc))}
	},
}

// replicationControllerScale is the scale subresource of ReplicationControllers, whose
// selector is a plain label map.
var replicationControllerScale = scaleSubresource(func(obj runtime.Object) (int32, int32, *metav1.LabelSelector) {
	rc := obj.(*corev1.ReplicationController)
	return replicasOf(rc.Spec.Replicas), rc.Status.Replicas, rcSelector(rc)
}, func(obj runtime.Object, n int32) { obj.(*corev1.ReplicationController).Spec.Replicas = &n })

// rcSelector is a ReplicationController's selector, a plain label map, as a LabelSelector;
// nil when it has none.
func rcSelector(rc *corev1.ReplicationController) *metav1.LabelSelector {
	if len(rc.Spec.Selector) == 0 {
		return nil
	}
	return metav1.SetAsLabelSelector(rc.Spec.Selector)
}
