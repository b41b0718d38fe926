package apiserver

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/version"
)

// registry is every resource the server serves, and the single owner of what differs
// between them: the verb handlers ask a resource's entry (and its strategy) and never
// compare resource names.
//
// To add a kind:
//
//  1. write its strategy (strategy_<group>.go): defaulting and validation on create and
//     update, what status writes may change, the `kubectl get` columns; and, next to it,
//     its selectable fields as one map (see fieldsOf);
//  2. register one resource entry for it in builtinResources: names, Go types, strategy,
//     fields, subresources and the few behaviour switches of resource.
//
// Special behaviour is opted into from the entry or the strategy, never from a verb
// file: a deletion lifecycle of its own (resource.deleteFunc), a grace period before
// removal (gracefulDeleter), a finalizer list outside metadata (deletionHolder), a name
// rule (resource.validateName), a subresource with its own handler (subresource.serve).
//
// Lookups are safe while another goroutine registers, so resources defined at run time
// (custom resources) can be added to a serving registry; such a caller must also give the
// entry a started watch cache before it registers it, since handlers use it at once.
type registry struct {
	mu       sync.RWMutex
	all      []*resource // in registration order, which discovery follows
	byGVR    map[schema.GroupVersionResource]*resource
	byGVK    map[schema.GroupVersionKind]*resource
	groups   []string            // API groups in registration order ("" is core)
	versions map[string][]string // group → its served versions, the preferred one first
	// revision counts registrations, so that what is derived from the whole registry
	// (the OpenAPI documents) knows when to derive it again.
	revision uint64
}

func newRegistry() *registry {
	return &registry{
		byGVR:    map[schema.GroupVersionResource]*resource{},
		byGVK:    map[schema.GroupVersionKind]*resource{},
		versions: map[string][]string{},
	}
}

// newBuiltinRegistry registers the kinds every miniplane serves.
func newBuiltinRegistry(deps builtinDeps) (*registry, error) {
	reg := newRegistry()
	for _, r := range builtinResources(deps) {
		if err := reg.register(r); err != nil {
			return nil, err
		}
	}
	return reg, nil
}

// register adds r. It fails when r lacks what every handler relies on, or when its
// group/version/resource or group/version/kind is already served: a second entry would
// shadow the first in one lookup and not in the other.
func (reg *registry) register(r *resource) error {
	if err := r.check(); err != nil {
		return err
	}
	gvr, gvk := r.gvr(), r.gvk()
	reg.mu.Lock()
	defer reg.mu.Unlock()
	if _, dup := reg.byGVR[gvr]; dup {
		return fmt.Errorf("apiserver: resource %s is already registered", gvr)
	}
	if _, dup := reg.byGVK[gvk]; dup {
		return fmt.Errorf("apiserver: kind %s is already registered", gvk)
	}
	reg.all = append(reg.all, r)
	reg.byGVR[gvr] = r
	reg.byGVK[gvk] = r
	versions, ok := reg.versions[r.group]
	if !ok {
		reg.groups = append(reg.groups, r.group)
	}
	if !slices.Contains(versions, r.version) {
		versions = append(versions, r.version)
		// Kubernetes' order of preference: GA before beta before alpha, newer first.
		slices.SortStableFunc(versions, func(a, b string) int { return -version.CompareKubeAwareVersionStrings(a, b) })
		reg.versions[r.group] = versions
	}
	reg.revision++
	return nil
}

// replace serves r in place of the resource registered at the same group/version/resource
// in one step, so that no request in between finds neither (a custom resource whose
// definition's schema changed). It registers r when nothing is served there, and reports
// the entry it replaced, if any.
func (reg *registry) replace(r *resource) (*resource, error) {
	if err := r.check(); err != nil {
		return nil, err
	}
	gvr, gvk := r.gvr(), r.gvk()
	reg.mu.Lock()
	old, ok := reg.byGVR[gvr]
	if !ok {
		reg.mu.Unlock()
		return nil, reg.register(r)
	}
	defer reg.mu.Unlock()
	if other, dup := reg.byGVK[gvk]; dup && other != old {
		return nil, fmt.Errorf("apiserver: kind %s is already registered", gvk)
	}
	delete(reg.byGVK, old.gvk())
	reg.byGVR[gvr], reg.byGVK[gvk] = r, r
	reg.all[slices.Index(reg.all, old)] = r
	reg.revision++
	return old, nil
}

// unregister removes the resource served at gvr (a custom resource whose definition went
// away), and its group when nothing else is served in it. It reports whether there was one.
func (reg *registry) unregister(gvr schema.GroupVersionResource) bool {
	reg.mu.Lock()
	defer reg.mu.Unlock()
	r, ok := reg.byGVR[gvr]
	if !ok {
		return false
	}
	delete(reg.byGVR, gvr)
	delete(reg.byGVK, r.gvk())
	reg.all = slices.DeleteFunc(reg.all, func(x *resource) bool { return x == r })
	stillServed := false
	for _, x := range reg.all {
		if x.group == r.group && x.version == r.version {
			stillServed = true
		}
	}
	if !stillServed {
		reg.versions[r.group] = slices.DeleteFunc(reg.versions[r.group], func(v string) bool { return v == r.version })
		if len(reg.versions[r.group]) == 0 {
			delete(reg.versions, r.group)
			reg.groups = slices.DeleteFunc(reg.groups, func(g string) bool { return g == r.group })
		}
	}
	reg.revision++
	return true
}

// currentRevision changes whenever a resource is registered.
func (reg *registry) currentRevision() uint64 {
	reg.mu.RLock()
	defer reg.mu.RUnlock()
	return reg.revision
}

// check reports what is missing or inconsistent in a resource entry.
func (r *resource) check() error {
	var missing []string
	for what, ok := range map[string]bool{
		"version": r.version != "", "name": r.name != "", "kind": r.kind != "", "singular": r.singular != "",
		"newFunc": r.newFunc != nil, "newListFunc": r.newListFunc != nil, "strategy": r.strategy != nil,
	} {
		if !ok {
			missing = append(missing, what)
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		return fmt.Errorf("apiserver: resource %q of %s/%s lacks %s", r.name, r.group, r.version, strings.Join(missing, ", "))
	}
	if r.name != strings.ToLower(r.name) || strings.Contains(r.name, "/") {
		return fmt.Errorf("apiserver: resource name %q must be lower case without '/'", r.name)
	}
	seen := map[string]bool{}
	for _, sub := range r.subresources {
		if sub.name == "" || len(sub.verbs) == 0 || seen[sub.name] {
			return fmt.Errorf("apiserver: resource %s: subresource %q needs a unique name and verbs", r.name, sub.name)
		}
		seen[sub.name] = true
	}
	for f := range r.fields {
		if f == "metadata.name" || f == "metadata.namespace" {
			return fmt.Errorf("apiserver: resource %s: %s is selectable for every kind and must not be declared", r.name, f)
		}
	}
	return nil
}

// lookup returns the resource served at group/version/name, or nil.
func (reg *registry) lookup(group, version, name string) *resource {
	reg.mu.RLock()
	defer reg.mu.RUnlock()
	return reg.byGVR[schema.GroupVersionResource{Group: group, Version: version, Resource: name}]
}

// lookupGroupResource returns the resource served as group/resource, whatever its version,
// or nil.
func (reg *registry) lookupGroupResource(gr schema.GroupResource) *resource {
	reg.mu.RLock()
	defer reg.mu.RUnlock()
	for _, v := range reg.versions[gr.Group] {
		if r, ok := reg.byGVR[gr.WithVersion(v)]; ok {
			return r
		}
	}
	return nil
}

// lookupKind returns the resource that serves gvk, or nil.
func (reg *registry) lookupKind(gvk schema.GroupVersionKind) *resource {
	reg.mu.RLock()
	defer reg.mu.RUnlock()
	return reg.byGVK[gvk]
}

// resources returns every resource in registration order. The slice is the caller's.
func (reg *registry) resources() []*resource {
	reg.mu.RLock()
	defer reg.mu.RUnlock()
	return append([]*resource(nil), reg.all...)
}

// inGroupVersion returns the resources of one group/version in registration order.
func (reg *registry) inGroupVersion(group, version string) []*resource {
	reg.mu.RLock()
	defer reg.mu.RUnlock()
	var out []*resource
	for _, r := range reg.all {
		if r.group == group && r.version == version {
			out = append(out, r)
		}
	}
	return out
}

// groupVersions returns each served group ("" is core) with its preferred version, in
// registration order.
func (reg *registry) groupVersions() []schema.GroupVersion {
	reg.mu.RLock()
	defer reg.mu.RUnlock()
	out := make([]schema.GroupVersion, len(reg.groups))
	for i, g := range reg.groups {
		out[i] = schema.GroupVersion{Group: g, Version: reg.versions[g][0]}
	}
	return out
}

// allGroupVersions returns every served group/version, group by group in registration
// order, each group's preferred version first.
func (reg *registry) allGroupVersions() []schema.GroupVersion {
	reg.mu.RLock()
	defer reg.mu.RUnlock()
	var out []schema.GroupVersion
	for _, g := range reg.groups {
		for _, v := range reg.versions[g] {
			out = append(out, schema.GroupVersion{Group: g, Version: v})
		}
	}
	return out
}

// groupVersion returns the preferred version served for group, if the group is served.
func (reg *registry) groupVersion(group string) (string, bool) {
	reg.mu.RLock()
	defer reg.mu.RUnlock()
	v, ok := reg.versions[group]
	if !ok {
		return "", false
	}
	return v[0], true
}

// servedVersions returns every version served for group, the preferred one first.
func (reg *registry) servedVersions(group string) []string {
	reg.mu.RLock()
	defer reg.mu.RUnlock()
	return slices.Clone(reg.versions[group])
}

// groupVersionPath is the URL prefix of a group/version: /api/v1 or /apis/<g>/<v>.
func groupVersionPath(group, version string) string {
	if group == "" {
		return "/api/" + version
	}
	return "/apis/" + group + "/" + version
}
