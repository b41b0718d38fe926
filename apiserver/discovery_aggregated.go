package apiserver

import (
	"encoding/json"
	"mime"
	"net/http"
	"strings"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Aggregated discovery (apidiscovery.k8s.io/v2) answers /api and /apis with every group,
// version and resource in one document, so that a client learns the whole API in two
// requests instead of one per group version. client-go asks for it first and falls back to
// the per-group-version documents when the answer's Content-Type says it got those. Both
// formats are built from the same resource lists (resourceList), so they cannot disagree.

// aggregatedDiscoveryMediaType is the Content-Type of an aggregated discovery answer; the
// parameters are what clients compare (in any order).
const aggregatedDiscoveryMediaType = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"

// wantsAggregatedDiscovery reads the Accept header as negotiate does, in order: the first
// media type we can serve decides. Only the JSON form of the v2 list is served; a
// protobuf or v2beta1 request for it falls through to the next media type.
func wantsAggregatedDiscovery(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept"), ",") {
		mediaType, params, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err != nil {
			continue
		}
		switch mediaType {
		case "application/json", "*/*", "application/*", protobufMediaType:
		default:
			continue
		}
		switch {
		case params["as"] == "":
			return false
		case mediaType == "application/json" && params["as"] == "APIGroupDiscoveryList" &&
			params["g"] == apidiscoveryv2.SchemeGroupVersion.Group && params["v"] == apidiscoveryv2.SchemeGroupVersion.Version:
			return true
		}
	}
	return false
}

// serveAggregatedDiscovery writes the aggregated document of the core group (/api) or of
// every other group (/apis).
func (s *Server) serveAggregatedDiscovery(w http.ResponseWriter, core bool) {
	list := &apidiscoveryv2.APIGroupDiscoveryList{
		TypeMeta: metav1.TypeMeta{Kind: "APIGroupDiscoveryList", APIVersion: apidiscoveryv2.SchemeGroupVersion.String()},
		Items:    []apidiscoveryv2.APIGroupDiscovery{},
	}
	if core {
		list.Items = append(list.Items, s.groupDiscovery(""))
	} else {
		for _, g := range s.discoveryGroups() {
			list.Items = append(list.Items, s.groupDiscovery(g))
		}
	}
	w.Header().Set("Vary", "Accept")
	data, err := json.Marshal(list)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", aggregatedDiscoveryMediaType)
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(data)
}

// groupDiscovery is one group with its versions, the preferred one first (as clients take
// the first for preferred), each with the resources of its legacy resource list.
func (s *Server) groupDiscovery(group string) apidiscoveryv2.APIGroupDiscovery {
	out := apidiscoveryv2.APIGroupDiscovery{ObjectMeta: metav1.ObjectMeta{Name: group}}
	versions := []string{"v1"}
	if group != "" {
		g := s.apiGroup(group)
		versions = versions[:0]
		for _, v := range g.Versions {
			versions = append(versions, v.Version)
		}
	}
	for _, v := range versions {
		rl, ok := s.resourceList(group, v)
		if !ok {
			continue
		}
		out.Versions = append(out.Versions, apidiscoveryv2.APIVersionDiscovery{
			Version:   v,
			Resources: aggregateResources(group, v, rl.APIResources),
			Freshness: apidiscoveryv2.DiscoveryFreshnessCurrent,
		})
	}
	return out
}

// aggregateResources turns a legacy resource list into aggregated entries: each
// "<resource>/<sub>" entry becomes a subresource of its parent. A kind without a group or
// version of its own is of the list's group version.
func aggregateResources(group, version string, in []metav1.APIResource) []apidiscoveryv2.APIResourceDiscovery {
	kindOf := func(ar metav1.APIResource) *metav1.GroupVersionKind {
		gvk := &metav1.GroupVersionKind{Group: group, Version: version, Kind: ar.Kind}
		if ar.Group != "" || ar.Version != "" {
			gvk.Group, gvk.Version = ar.Group, ar.Version
		}
		return gvk
	}
	var out []apidiscoveryv2.APIResourceDiscovery
	index := map[string]int{}
	for _, ar := range in {
		if strings.Contains(ar.Name, "/") {
			continue
		}
		scope := apidiscoveryv2.ScopeCluster
		if ar.Namespaced {
			scope = apidiscoveryv2.ScopeNamespace
		}
		index[ar.Name] = len(out)
		out = append(out, apidiscoveryv2.APIResourceDiscovery{
			Resource: ar.Name, ResponseKind: kindOf(ar), Scope: scope,
			SingularResource: ar.SingularName, Verbs: ar.Verbs,
			ShortNames: ar.ShortNames, Categories: ar.Categories,
		})
	}
	for _, ar := range in {
		parent, sub, ok := strings.Cut(ar.Name, "/")
		if !ok {
			continue
		}
		i, found := index[parent]
		if !found {
			continue
		}
		out[i].Subresources = append(out[i].Subresources, apidiscoveryv2.APISubresourceDiscovery{
			Subresource: sub, ResponseKind: kindOf(ar), Verbs: ar.Verbs,
		})
	}
	return out
}
