package apiserver

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"k8s.io/apiextensions-apiserver/pkg/apihelpers"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	crdvalidation "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/conversion"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/miniplane/miniplane/store"
)

// CustomResourceDefinitions are a built-in kind whose objects define more kinds. The API
// server itself does what kube-apiserver's apiextensions controllers do: it accepts a
// definition's names unless another definition holds them, registers a resource for each
// served version (with its own watch cache) and marks the definition Established; when a
// definition is deleted it deletes every custom resource of it, stops serving them and
// lets the definition go. Every API server does this from its own watch cache of the
// definitions, so several servers serve the same kinds.

// crdCleanupFinalizer holds a deleted definition until its custom resources are gone.
const crdCleanupFinalizer = "customresourcecleanup.apiextensions.k8s.io"

var crdsResource = apiextensionsv1.Resource("customresourcedefinitions")

// toInternalCRD converts a v1 definition to the internal types apiextensions' validation
// works on.
func toInternalCRD(crd *apiextensionsv1.CustomResourceDefinition) (*apiextensions.CustomResourceDefinition, error) {
	out := &apiextensions.CustomResourceDefinition{}
	err := crdScheme.Convert(crd, out, nil)
	return out, err
}

func internalErrors(crd *apiextensionsv1.CustomResourceDefinition, validate func(*apiextensions.CustomResourceDefinition) field.ErrorList) field.ErrorList {
	in, err := toInternalCRD(crd)
	if err != nil {
		return field.ErrorList{field.InternalError(field.NewPath("spec"), err)}
	}
	return validate(in)
}

// addStoredVersion records the storage version in status.storedVersions, as upstream's
// strategy does on every write.
func addStoredVersion(crd *apiextensionsv1.CustomResourceDefinition) {
	for _, v := range crd.Spec.Versions {
		if v.Storage && !apihelpers.IsStoredVersion(crd, v.Name) {
			crd.Status.StoredVersions = append(crd.Status.StoredVersions, v.Name)
		}
	}
}

var crdRules = kindRules[*apiextensionsv1.CustomResourceDefinition]{
	hasStatus: true,
	defaults:  func(crd *apiextensionsv1.CustomResourceDefinition) { crdScheme.Default(crd) },
	onCreate: func(crd *apiextensionsv1.CustomResourceDefinition, _ time.Time) {
		addStoredVersion(crd)
	},
	onUpdate: func(crd, _ *apiextensionsv1.CustomResourceDefinition, _ time.Time) {
		addStoredVersion(crd)
	},
	check: func(crd *apiextensionsv1.CustomResourceDefinition) field.ErrorList {
		return internalErrors(crd, func(in *apiextensions.CustomResourceDefinition) field.ErrorList {
			return crdvalidation.ValidateCustomResourceDefinition(context.Background(), in)
		})
	},
	checkStatus: func(crd, old *apiextensionsv1.CustomResourceDefinition) field.ErrorList {
		oldIn, err := toInternalCRD(old)
		if err != nil {
			return field.ErrorList{field.InternalError(field.NewPath("status"), err)}
		}
		return internalErrors(crd, func(in *apiextensions.CustomResourceDefinition) field.ErrorList {
			return crdvalidation.ValidateUpdateCustomResourceDefinitionStatus(context.Background(), in, oldIn)
		})
	},
	columns: createdAtColumns(),
	row: func(crd *apiextensionsv1.CustomResourceDefinition, _ time.Time) []any {
		return []any{crd.Name, createdAt(crd.CreationTimestamp)}
	},
}

// crdStrategy is crdRules with apiextensions' update validation, which includes what the
// create validation checks (kindRules would run both).
type crdStrategy struct {
	kindRules[*apiextensionsv1.CustomResourceDefinition]
}

func (crdStrategy) validateUpdate(obj, old runtime.Object) field.ErrorList {
	oldIn, err := toInternalCRD(old.(*apiextensionsv1.CustomResourceDefinition))
	if err != nil {
		return field.ErrorList{field.InternalError(field.NewPath("spec"), err)}
	}
	crd := obj.(*apiextensionsv1.CustomResourceDefinition)
	return internalErrors(crd, func(in *apiextensions.CustomResourceDefinition) field.ErrorList {
		return crdvalidation.ValidateCustomResourceDefinitionUpdate(context.Background(), in, oldIn)
	})
}

// deleteCRD is the definitions' deleteFunc: it marks a definition Terminating with the
// cleanup finalizer; crdController deletes its custom resources and then lets it go.
func (s *Server) deleteCRD(ctx context.Context, res *resource, _, name string, opts *metav1.DeleteOptions,
	authorize func(runtime.Object) error) (runtime.Object, bool, error) {
	key := res.key(s.cfg.EtcdPrefix, "", name)
	if len(opts.DryRun) > 0 {
		obj, err := s.store.Get(ctx, key)
		if err == nil && authorize != nil {
			err = authorize(obj)
		}
		return obj, false, err
	}
	out, err := s.store.GuaranteedUpdate(ctx, key, func(cur runtime.Object) (runtime.Object, error) {
		if authorize != nil {
			if err := authorize(cur); err != nil {
				return nil, err
			}
		}
		crd := cur.(*apiextensionsv1.CustomResourceDefinition)
		if p := opts.Preconditions; p != nil && p.UID != nil && *p.UID != crd.UID {
			return nil, conflictError(res.groupResource(), name)
		}
		if crd.DeletionTimestamp == nil {
			now := metav1.NewTime(s.clock.Now().Truncate(time.Second))
			crd.DeletionTimestamp = &now
			zero := int64(0)
			crd.DeletionGracePeriodSeconds = &zero
		}
		if !apihelpers.CRDHasFinalizer(crd, crdCleanupFinalizer) {
			crd.Finalizers = append(crd.Finalizers, crdCleanupFinalizer)
		}
		apihelpers.SetCRDCondition(crd, apiextensionsv1.CustomResourceDefinitionCondition{
			Type: apiextensionsv1.Terminating, Status: apiextensionsv1.ConditionTrue,
			Reason: "InstanceDeletionPending", Message: "CustomResourceDefinition marked for deletion; CustomResource deletion will begin soon",
		})
		return crd, nil
	}, store.UpdateOptions{})
	if err != nil {
		return nil, false, err
	}
	s.crds.changed(crdsResource.String())
	return out, false, nil
}

// crdController keeps the served custom resources in line with the definitions.
type crdController struct {
	s *Server
	*recountLoop

	// converters makes each definition's converter between its versions.
	converters *conversion.CRConverterFactory

	mu sync.Mutex
	// served is what each definition (by name) has registered, to tell a change.
	served map[string]*servedCRD
}

type servedCRD struct {
	uid        string
	generation int64
	names      apiextensionsv1.CustomResourceDefinitionNames
	resources  []*resource
}

func newCRDController(s *Server) (*crdController, error) {
	converters, err := conversion.NewCRConverterFactory(serviceNotCalled{}, nil)
	if err != nil {
		return nil, err
	}
	c := &crdController{s: s, converters: converters, served: map[string]*servedCRD{}}
	c.recountLoop = newRecountLoop("customresourcedefinitions", s.log, func(ctx context.Context, _ string) error {
		return c.reconcile(ctx)
	})
	return c, nil
}

// reconcile brings every definition's names, status and served resources up to date.
func (c *crdController) reconcile(ctx context.Context) error {
	var crds []*apiextensionsv1.CustomResourceDefinition
	for _, obj := range c.s.cached(crdsResource, "") {
		crds = append(crds, obj.(*apiextensionsv1.CustomResourceDefinition))
	}
	// Older definitions win a name both claim, as with kube-apiserver.
	sort.SliceStable(crds, func(i, j int) bool {
		return crds[i].CreationTimestamp.Before(&crds[j].CreationTimestamp)
	})
	var errs []error
	taken := map[string]string{} // group/plural, group/kind … → definition name
	seen := map[string]bool{}
	for _, crd := range crds {
		seen[crd.Name] = true
		if crd.DeletionTimestamp != nil {
			if err := c.cleanUp(ctx, crd); err != nil {
				errs = append(errs, err)
			}
			continue
		}
		conflict := c.claimNames(crd, taken)
		if err := c.serve(ctx, crd, conflict); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", crd.Name, err))
		}
	}
	c.mu.Lock()
	for name, sc := range c.served {
		if !seen[name] {
			c.stopServing(sc)
			delete(c.served, name)
		}
	}
	c.mu.Unlock()
	return errors.Join(errs...)
}

// claimNames records crd's names as taken, unless a definition seen before holds one of
// them (or a built-in kind does); it returns the conflict, or "".
func (c *crdController) claimNames(crd *apiextensionsv1.CustomResourceDefinition, taken map[string]string) string {
	n := crd.Spec.Names
	claims := []string{"plural/" + n.Plural, "kind/" + n.Kind}
	if n.Singular != "" {
		claims = append(claims, "plural/"+n.Singular)
	}
	for _, sn := range n.ShortNames {
		claims = append(claims, "short/"+sn)
	}
	for _, cl := range claims {
		if owner, ok := taken[crd.Spec.Group+"/"+cl]; ok && owner != crd.Name {
			_, name, _ := strings.Cut(cl, "/")
			return fmt.Sprintf("%q is already in use", name)
		}
	}
	if r := c.s.reg.lookupGroupResource(schema.GroupResource{Group: crd.Spec.Group, Resource: n.Plural}); r != nil && r.custom == nil {
		return fmt.Sprintf("%q is already in use", n.Plural)
	}
	for _, cl := range claims {
		taken[crd.Spec.Group+"/"+cl] = crd.Name
	}
	return ""
}

// serve registers crd's served versions (anew when the definition changed) and writes
// its status: names accepted, established.
func (c *crdController) serve(ctx context.Context, crd *apiextensionsv1.CustomResourceDefinition, conflict string) error {
	c.mu.Lock()
	cur := c.served[crd.Name]
	c.mu.Unlock()
	if conflict != "" {
		if cur != nil {
			c.mu.Lock()
			c.stopServing(cur)
			delete(c.served, crd.Name)
			c.mu.Unlock()
		}
		return c.writeStatus(ctx, crd.Name, func(st *apiextensionsv1.CustomResourceDefinition) {
			apihelpers.SetCRDCondition(st, apiextensionsv1.CustomResourceDefinitionCondition{Type: apiextensionsv1.NamesAccepted,
				Status: apiextensionsv1.ConditionFalse, Reason: "NameConflict", Message: conflict})
			apihelpers.SetCRDCondition(st, apiextensionsv1.CustomResourceDefinitionCondition{Type: apiextensionsv1.Established,
				Status: apiextensionsv1.ConditionFalse, Reason: "NotAccepted", Message: "not all names are accepted"})
		})
	}
	if cur == nil || cur.uid != string(crd.UID) || cur.generation != crd.Generation {
		accepted := crd.DeepCopy()
		accepted.Status.AcceptedNames = crd.Spec.Names
		conv, err := newCustomResourceConverter(c.converters, accepted)
		if err != nil {
			return err
		}
		var resources []*resource
		for _, v := range crd.Spec.Versions {
			if !v.Served {
				continue
			}
			cv, err := newCustomResourceVersion(accepted, v)
			if err != nil {
				return err
			}
			cv.conv = conv
			resources = append(resources, customResource(cv))
		}
		if cur == nil && len(resources) > 0 {
			if err := c.moveFromUngroupedKeys(ctx, resources[0]); err != nil {
				return err
			}
		}
		// Every version is the same resource to a webhook that matches equivalents.
		for _, r := range resources {
			c.s.equivalents.RegisterKindFor(r.gvr(), "", r.gvk())
			for i := range r.subresources {
				c.s.equivalents.RegisterKindFor(r.gvr(), r.subresources[i].name, r.subresourceGVK(&r.subresources[i]))
			}
		}
		// New entries take the place of the old ones of the same version without a gap;
		// versions no longer served go afterwards.
		for _, r := range resources {
			if err := c.s.replaceResource(ctx, r); err != nil {
				return err
			}
		}
		if cur != nil {
			var gone []*resource
			for _, old := range cur.resources {
				if !slices.ContainsFunc(resources, func(r *resource) bool { return r.gvr() == old.gvr() }) {
					gone = append(gone, old)
				}
			}
			c.mu.Lock()
			c.stopServing(&servedCRD{resources: gone})
			c.mu.Unlock()
		}
		c.mu.Lock()
		c.served[crd.Name] = &servedCRD{uid: string(crd.UID), generation: crd.Generation, names: crd.Spec.Names, resources: resources}
		c.mu.Unlock()
	}
	return c.writeStatus(ctx, crd.Name, func(st *apiextensionsv1.CustomResourceDefinition) {
		st.Status.AcceptedNames = st.Spec.Names
		apihelpers.SetCRDCondition(st, apiextensionsv1.CustomResourceDefinitionCondition{Type: apiextensionsv1.NamesAccepted,
			Status: apiextensionsv1.ConditionTrue, Reason: "NoConflicts", Message: "no conflicts found"})
		apihelpers.SetCRDCondition(st, apiextensionsv1.CustomResourceDefinitionCondition{Type: apiextensionsv1.Established,
			Status: apiextensionsv1.ConditionTrue, Reason: "InitialNamesAccepted", Message: "the initial names have been accepted"})
		addStoredVersion(st)
	})
}

// stopServing unregisters a definition's resources and ends their watches. Callers hold c.mu.
func (c *crdController) stopServing(sc *servedCRD) {
	for _, r := range sc.resources {
		if c.s.reg.unregister(r.gvr()) {
			r.cache.terminateAll()
			if r.stop != nil {
				r.stop()
			}
		}
	}
}

// writeStatus changes a definition's status with change, writing only when it changed.
func (c *crdController) writeStatus(ctx context.Context, name string, change func(*apiextensionsv1.CustomResourceDefinition)) error {
	res := c.s.reg.lookupGroupResource(crdsResource)
	_, err := c.s.store.GuaranteedUpdate(ctx, res.key(c.s.cfg.EtcdPrefix, "", name), func(cur runtime.Object) (runtime.Object, error) {
		crd := cur.(*apiextensionsv1.CustomResourceDefinition)
		before := crd.Status.DeepCopy()
		change(crd)
		if apiequality.Semantic.DeepEqual(before, &crd.Status) {
			return nil, errDryRun{}
		}
		return crd, nil
	}, store.UpdateOptions{})
	var dr errDryRun
	if errors.As(err, &dr) || errors.Is(err, store.ErrNotFound) {
		return nil
	}
	return err
}

// cleanUp deletes every custom resource of a deleted definition, then drops its
// finalizer so the definition goes.
func (c *crdController) cleanUp(ctx context.Context, crd *apiextensionsv1.CustomResourceDefinition) error {
	c.mu.Lock()
	sc := c.served[crd.Name]
	c.mu.Unlock()
	if !apihelpers.CRDHasFinalizer(crd, crdCleanupFinalizer) {
		return nil
	}
	if sc != nil && len(sc.resources) > 0 {
		for _, r := range sc.resources {
			r.terminating.Store(true)
		}
		// The storage version's resource deletes them: it converts only what was stored
		// in another version.
		r := sc.resources[0]
		for _, sr := range sc.resources {
			if sr.custom != nil && sr.custom.version.Storage {
				r = sr
			}
		}
		list, err := c.s.store.List(ctx, r.keyPrefix(c.s.cfg.EtcdPrefix, ""), store.ListOptions{})
		if err != nil {
			return err
		}
		zero := int64(0)
		opts := &metav1.DeleteOptions{GracePeriodSeconds: &zero}
		for _, obj := range list.Items {
			m := obj.(metav1.Object)
			if _, _, err := c.s.deleteObject(ctx, r, m.GetNamespace(), m.GetName(), opts, nil); err != nil && !errors.Is(err, store.ErrNotFound) {
				return err
			}
		}
		if len(list.Items) > 0 {
			// Custom resources with finalizers of their own go when those are done.
			left, err := c.s.store.Count(ctx, r.keyPrefix(c.s.cfg.EtcdPrefix, ""))
			if err != nil {
				return err
			}
			if left > 0 {
				time.AfterFunc(time.Second, func() { c.changed(crdsResource.String()) })
				return nil
			}
		}
		c.mu.Lock()
		c.stopServing(sc)
		delete(c.served, crd.Name)
		c.mu.Unlock()
	}
	res := c.s.reg.lookupGroupResource(crdsResource)
	_, err := c.s.store.GuaranteedUpdate(ctx, res.key(c.s.cfg.EtcdPrefix, "", crd.Name), func(cur runtime.Object) (runtime.Object, error) {
		d := cur.(*apiextensionsv1.CustomResourceDefinition)
		apihelpers.CRDRemoveFinalizer(d, crdCleanupFinalizer)
		if len(d.Finalizers) == 0 {
			return nil, nil
		}
		return d, nil
	}, store.UpdateOptions{})
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	return err
}

// moveFromUngroupedKeys moves the custom resources of r's definition that an earlier
// miniplane stored under <prefix>/<plural>/, without the group, to their keys (r.key, see
// resource.storageName). The old prefix may hold a built-in kind's objects or another
// group's of the same plural: only unstructured objects of r's group move. An object moved
// gets a new resourceVersion, as after any write.
func (c *crdController) moveFromUngroupedKeys(ctx context.Context, r *resource) error {
	prefix := c.s.cfg.EtcdPrefix + "/" + r.name + "/"
	list, err := c.s.store.List(ctx, prefix, store.ListOptions{})
	if err != nil {
		return err
	}
	moved := 0
	for _, obj := range list.Items {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok || u.GroupVersionKind().Group != r.group {
			continue
		}
		newKey := r.key(c.s.cfg.EtcdPrefix, u.GetNamespace(), u.GetName())
		oldKey := prefix + u.GetName()
		if r.namespaced {
			oldKey = prefix + u.GetNamespace() + "/" + u.GetName()
		}
		uid := u.GetUID()
		u.SetResourceVersion("")
		// A move cut short before (created, not deleted) is finished here.
		if _, err := c.s.store.Create(ctx, newKey, u, 0); err != nil && !errors.Is(err, store.ErrAlreadyExists) {
			return fmt.Errorf("moving %s to %s: %w", oldKey, newKey, err)
		}
		if _, err := c.s.store.Delete(ctx, oldKey, &store.Preconditions{UID: &uid}, nil); err != nil && !errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("moving %s to %s: %w", oldKey, newKey, err)
		}
		moved++
	}
	if moved > 0 {
		c.s.log.Info("custom resources moved to keys with their group", "resource", r.groupResource().String(), "objects", moved)
	}
	return nil
}
