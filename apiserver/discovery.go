package apiserver

import (
	"fmt"
	"net/http"
	"runtime"
	"sort"

	"github.com/gorilla/mux"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/version"
	apidiscovery "k8s.io/apiserver/pkg/endpoints/discovery"
)

// Version is miniplane's own version.
var Version = "v0.1.0"

// kubernetesVersion is the Kubernetes API version miniplane serves: the k8s.io/api module
// its objects come from.
const kubernetesVersion = "v1.37.2"

// VersionInfo is what /version reports: the Kubernetes version whose API is served, with
// miniplane named in the build metadata so clients can tell it apart.
func VersionInfo() version.Info {
	return version.Info{
		Major:      "1",
		Minor:      "37",
		GitVersion: kubernetesVersion + "+miniplane",
		GitCommit:  Version,
		GoVersion:  runtime.Version(),
		Compiler:   runtime.Compiler,
		Platform:   runtime.GOOS + "/" + runtime.GOARCH,
	}
}

func serveVersion(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, VersionInfo())
}

func (s *Server) serveCoreVersions(w http.ResponseWriter, r *http.Request) {
	if wantsAggregatedDiscovery(r) {
		s.serveAggregatedDiscovery(w, true)
		return
	}
	w.Header().Set("Vary", "Accept")
	writeJSON(w, http.StatusOK, &metav1.APIVersions{
		TypeMeta: metav1.TypeMeta{Kind: "APIVersions"},
		Versions: []string{"v1"},
		ServerAddressByClientCIDRs: []metav1.ServerAddressByClientCIDR{
			{ClientCIDR: "0.0.0.0/0", ServerAddress: r.Host},
		},
	})
}

func (s *Server) apiGroup(name string) metav1.APIGroup {
	versions := s.reg.servedVersions(name)
	if len(versions) == 0 {
		v, _ := reviewGroupVersion(name)
		versions = []string{v}
	}
	g := metav1.APIGroup{TypeMeta: metav1.TypeMeta{Kind: "APIGroup", APIVersion: "v1"}, Name: name}
	for _, v := range versions {
		g.Versions = append(g.Versions, metav1.GroupVersionForDiscovery{GroupVersion: name + "/" + v, Version: v})
	}
	g.PreferredVersion = g.Versions[0]
	return g
}

// discoveryGroups are the groups /apis lists: the served ones in registration order, then
// the review groups.
func (s *Server) discoveryGroups() []string {
	var out []string
	for _, gv := range s.reg.groupVersions() {
		if gv.Group != "" {
			out = append(out, gv.Group)
		}
	}
	return append(out, reviewGroups()...)
}

func (s *Server) serveGroups(w http.ResponseWriter, r *http.Request) {
	if wantsAggregatedDiscovery(r) {
		s.serveAggregatedDiscovery(w, false)
		return
	}
	list := &metav1.APIGroupList{TypeMeta: metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"}}
	for _, g := range s.discoveryGroups() {
		list.Groups = append(list.Groups, s.apiGroup(g))
	}
	w.Header().Set("Vary", "Accept")
	writeJSON(w, http.StatusOK, list)
}

func (s *Server) serveGroup(w http.ResponseWriter, r *http.Request) {
	group := mux.Vars(r)["group"]
	_, served := s.reg.groupVersion(group)
	_, reviewed := reviewGroupVersion(group)
	if (!served && !reviewed) || group == "" {
		writeError(w, r, notFoundPath(r), groupResourceNone, "")
		return
	}
	g := s.apiGroup(group)
	writeJSON(w, http.StatusOK, &g)
}

// verbsMain are the verbs discovery lists for every served resource. (It lists
// deletecollection for namespaces too, which answer it with 405, as it always has.)
var verbsMain = metav1.Verbs{"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"}

func (s *Server) serveResourceList(w http.ResponseWriter, r *http.Request) {
	list, ok := s.resourceList(mux.Vars(r)["group"], mux.Vars(r)["version"])
	if !ok {
		writeError(w, r, notFoundPath(r), groupResourceNone, "")
		return
	}
	writeJSON(w, http.StatusOK, list)
}

// resourceList is the discovery document of one group version, resources sorted by name,
// each subresource an entry "<resource>/<sub>" of its own; false when the group version is
// not served.
func (s *Server) resourceList(group, ver string) (*metav1.APIResourceList, bool) {
	resources := s.reg.inGroupVersion(group, ver)
	if len(resources) == 0 {
		if reviews := reviewResources(group, ver); len(reviews) > 0 {
			return &metav1.APIResourceList{
				TypeMeta:     metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"},
				GroupVersion: group + "/" + ver, APIResources: reviews,
			}, true
		}
		return nil, false
	}
	list := &metav1.APIResourceList{
		TypeMeta:     metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"},
		GroupVersion: resources[0].apiVersion(),
	}
	for _, res := range resources {
		list.APIResources = append(list.APIResources, metav1.APIResource{
			Name: res.name, SingularName: res.singular, Namespaced: res.namespaced, Kind: res.kind,
			Verbs: verbsMain, ShortNames: res.shortNames, Categories: res.categories,
			StorageVersionHash: storageVersionHash(res),
		})
		for _, sub := range res.subresources {
			ar := metav1.APIResource{Name: res.name + "/" + sub.name,
				Namespaced: res.namespaced, Kind: res.subresourceKind(&sub), Verbs: sub.verbs}
			if sub.kindGroupVersion != nil {
				// Clients find the kind's group this way (kubectl drain finds policy/v1
				// Eviction, or deletes pods instead of evicting them).
				ar.Group, ar.Version = sub.kindGroupVersion.Group, sub.kindGroupVersion.Version
			}
			list.APIResources = append(list.APIResources, ar)
		}
	}
	sort.SliceStable(list.APIResources, func(i, j int) bool { return list.APIResources[i].Name < list.APIResources[j].Name })
	return list, true
}

// storageVersionHash lets clients notice a storage version change (the storage version
// migrator, the garbage collector) and tell which resources share their storage: it is
// kube-apiserver's digest of the group/version/kind objects are stored as, the same for a
// view and the resource it views.
func storageVersionHash(res *resource) string {
	if res.view != nil {
		res = res.view.storage
	}
	return apidiscovery.StorageVersionHash(res.group, res.version, res.kind)
}

func notFoundPath(r *http.Request) error {
	return statusError(http.StatusNotFound, metav1.StatusReasonNotFound,
		fmt.Sprintf("the server could not find the requested resource (%s %s)", r.Method, r.URL.Path))
}
