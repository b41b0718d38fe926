package apiserver

import (
	"bytes"
	"crypto/sha512"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/NYTimes/gziphandler"
	crdbuilder "k8s.io/apiextensions-apiserver/pkg/controller/openapi/builder"
	"k8s.io/apimachinery/pkg/runtime/schema"
	endpointsopenapi "k8s.io/apiserver/pkg/endpoints/openapi"
	"k8s.io/kube-openapi/pkg/builder"
	"k8s.io/kube-openapi/pkg/builder3"
	"k8s.io/kube-openapi/pkg/cached"
	"k8s.io/kube-openapi/pkg/common"
	"k8s.io/kube-openapi/pkg/handler"
	"k8s.io/kube-openapi/pkg/handler3"
	"k8s.io/kube-openapi/pkg/spec3"
	"k8s.io/kube-openapi/pkg/util"
	"k8s.io/kube-openapi/pkg/validation/spec"

	"github.com/miniplane/miniplane/apiserver/internal/openapidefs"
)

// The server publishes OpenAPI v2 (/openapi/v2, JSON or protobuf) and v3 (/openapi/v3,
// one document per group version) documents with the full schema of every served kind,
// built from the registry and the definitions openapi-gen generated from the Go types
// (see docs/openapi.md). kube-openapi's handlers serve them, with their ETags, gzip and
// the v3 hash redirects clients cache by.
//
// Clients negotiate on them: kubectl sends fieldValidation=Strict, and skips its own
// validation, only when the PATCH operation of the object's group/version/kind lists a
// fieldValidation query parameter, so every PATCH operation lists it; `kubectl explain`
// reads the schemas; kubectl apply computes strategic merge patches from them.

// openAPIDocs serves the documents of the registry's current revision. The v2 document is
// built on its first request after the registry changed (custom resources register kinds at
// run time) and kept, encoded, as kube-apiserver keeps it. A v3 group version's document is
// built for each request and not kept: the v3 root lists every group version's hash, so
// kubectl's first apply or explain after a start asks for all of them, and keeping them all
// (about 18 MB of live heap, built and encoded) doubled into the collector's goal at the
// memory budget. Clients cache a document by its hashed URL, so they rarely ask twice. The
// root's hashes are computed once per revision, each from a document built and dropped. The
// field managers read the schemas of the same revision without the documents (schemas).
type openAPIDocs struct {
	reg *registry

	// v3Root and v3Serve answer the v3 root and a group version's document, with gzip.
	v3Root  http.Handler
	v3Serve http.Handler

	mu       sync.Mutex
	built    bool
	revision uint64 // of the registry the documents describe
	plan     *openAPIPlan
	v2       *handler.OpenAPIService
	v2Serve  http.Handler
	v2Spec   cached.Value[*spec.Swagger]
	// v3Index is the v3 root: every group version's URL, with its document's hash.
	v3Index cached.Value[timedBytes]
	schemas cached.Value[map[string]*spec.Schema]
}

// timedBytes is an encoded answer and when it was made, for Last-Modified.
type timedBytes struct {
	data     []byte
	modified time.Time
}

func newOpenAPIDocs(reg *registry) *openAPIDocs {
	d := &openAPIDocs{reg: reg}
	d.v3Root = gziphandler.GzipHandler(http.HandlerFunc(d.serveV3Root))
	d.v3Serve = gziphandler.GzipHandler(http.HandlerFunc(d.serveV3GroupVersion))
	return d
}

// pathHandler captures what kube-openapi's handlers register, for the router to serve.
type pathHandler map[string]http.Handler

func (p pathHandler) Handle(path string, h http.Handler)       { p[path] = h }
func (p pathHandler) HandlePrefix(path string, h http.Handler) { p[path] = h }

// sync plans the documents again if the registry changed since they were planned. Planning
// is cheap (the routes of every resource); the documents are built when first served.
func (d *openAPIDocs) sync() error {
	// The revision is read before the resources, so a registration racing with the plan
	// leaves a newer revision behind and the next request plans again.
	rev := d.reg.currentRevision()
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.built && d.revision == rev {
		return nil
	}
	p, err := planOpenAPI(d.reg.resources())
	if err != nil {
		return err
	}
	// The tag names what a lazy value holds; the handlers compute their ETags from the
	// encoded documents.
	tag := strconv.FormatUint(rev, 10)
	v2 := cached.Once(cached.Func(func() (*spec.Swagger, string, error) {
		doc, err := p.v2()
		return doc, tag, err
	}))
	if d.v2 == nil {
		d.v2 = handler.NewOpenAPIServiceLazy(v2)
		h := pathHandler{}
		d.v2.RegisterOpenAPIVersionedService("/openapi/v2", h)
		d.v2Serve = h["/openapi/v2"]
	} else {
		d.v2.UpdateSpecLazy(v2)
	}
	d.plan, d.v2Spec = p, v2
	d.v3Index = cached.Once(cached.Func(func() (timedBytes, string, error) {
		index, err := p.v3Index()
		if err != nil {
			return timedBytes{}, "", err
		}
		return timedBytes{data: index, modified: time.Now()}, openAPIHash(index), nil
	}))
	d.schemas = cached.Once(cached.Func(func() (map[string]*spec.Schema, string, error) {
		s, err := p.schemas()
		return s, tag, err
	}))
	d.built, d.revision = true, rev
	return nil
}

// current returns the lazy v2 document, the plan the v3 documents are built from and the
// lazy schemas, of the registry's current revision.
func (d *openAPIDocs) current() (cached.Value[*spec.Swagger], *openAPIPlan, cached.Value[map[string]*spec.Schema], error) {
	if err := d.sync(); err != nil {
		return nil, nil, nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.v2Spec, d.plan, d.schemas, nil
}

func (s *Server) serveOpenAPIV2(w http.ResponseWriter, r *http.Request) {
	if err := s.openapi.sync(); err != nil {
		writeError(w, r, err, groupResourceNone, "")
		return
	}
	s.openapi.v2Serve.ServeHTTP(w, r)
}

func (s *Server) serveOpenAPIRoot(w http.ResponseWriter, r *http.Request) {
	s.openapi.v3Root.ServeHTTP(w, r)
}

func (s *Server) serveOpenAPIGroupVersion(w http.ResponseWriter, r *http.Request) {
	s.openapi.v3Serve.ServeHTTP(w, r)
}

// serveV3Root answers the v3 root as kube-openapi's handler3 does, from the index.
func (d *openAPIDocs) serveV3Root(w http.ResponseWriter, r *http.Request) {
	if err := d.sync(); err != nil {
		writeError(w, r, err, groupResourceNone, "")
		return
	}
	d.mu.Lock()
	index := d.v3Index
	d.mu.Unlock()
	root, etag, err := index.Get()
	if err != nil {
		writeError(w, r, err, groupResourceNone, "")
		return
	}
	w.Header().Set("Etag", strconv.Quote(etag))
	w.Header().Set("Content-Type", "application/json")
	http.ServeContent(w, r, "/openapi/v3", root.modified, bytes.NewReader(root.data))
}

// serveV3GroupVersion answers one group version's v3 document, built for this request and
// served by a handler3 service of its own, so that its content negotiation, ETag and hash
// redirects are kube-openapi's and nothing outlives the answer.
func (d *openAPIDocs) serveV3GroupVersion(w http.ResponseWriter, r *http.Request) {
	_, p, _, err := d.current()
	if err != nil {
		writeError(w, r, err, groupResourceNone, "")
		return
	}
	path := strings.TrimPrefix(r.URL.Path, "/openapi/v3/")
	// handler3 answers an unknown group version with an empty 200.
	if !slices.Contains(p.v3Paths, path) {
		writeError(w, r, notFoundPath(r), groupResourceNone, "")
		return
	}
	one := handler3.NewOpenAPIService()
	one.UpdateGroupVersionLazy(path, cached.Func(func() (*spec3.OpenAPI, string, error) {
		doc, err := p.v3(path)
		return doc, path, err
	}))
	one.HandleGroupVersion(w, r)
}

// openAPIHash is the hash handler3 gives an encoded document: its ETag, and the hash in its
// v3 URL.
func openAPIHash(encoded []byte) string {
	return fmt.Sprintf("%X", sha512.Sum512(encoded))
}

// v3URL is where a group version's v3 document of hash is served, as handler3 names it.
func v3URL(path, hash string) string {
	return (&url.URL{Path: "/openapi/v3/" + path, RawQuery: url.Values{"hash": {hash}}.Encode()}).String()
}

// openAPIPlan is what the documents of one registry snapshot are built from: the routes of
// every served group version and the generated definitions.
type openAPIPlan struct {
	// mu makes the builds of a plan one at a time (the v3 root builds every group
	// version's document at once, in goroutines of its own): two cores gain nothing from
	// building twenty documents side by side.
	mu         sync.Mutex
	custom     []*resource
	containers map[string]*apiRoutes // by v3 path
	// v3Paths are every group version's path below /openapi/v3/, custom ones included.
	v3Paths []string
	namer   *endpointsopenapi.DefinitionNamer
	info    *spec.Info
}

// planOpenAPI plans the v2 document and the v3 document of every group version of
// resources and the review APIs. A kind without generated definitions fails here rather
// than when a document is first asked for.
func planOpenAPI(all []*resource) (*openAPIPlan, error) {
	// Custom resources are described from their definitions' schemas (customV2, customV3).
	p := &openAPIPlan{containers: map[string]*apiRoutes{}}
	var resources []*resource
	for _, r := range all {
		if r.custom != nil {
			p.custom = append(p.custom, r)
		} else {
			resources = append(resources, r)
		}
	}
	// Definitions read for parameter descriptions only: no reference is followed.
	plain := openapidefs.GetOpenAPIDefinitions(func(name string) spec.Ref { return spec.Ref{} })
	b := newRouteBuilder(resources, plain)
	containers, err := b.build()
	if err != nil {
		return nil, err
	}
	p.namer = b.definitionNamer()
	for _, m := range b.models {
		name := util.GetCanonicalTypeName(m.obj)
		if _, ok := plain[name]; !ok {
			defName, _ := p.namer.GetDefinitionName(name)
			return nil, fmt.Errorf("apiserver: OpenAPI for %s: no generated definition for %s", m.gvk, defName)
		}
	}
	p.info = &spec.Info{InfoProps: spec.InfoProps{Title: "Kubernetes", Version: kubernetesVersion}}
	for _, c := range containers {
		path := openAPIV3Path(c.gv)
		p.containers[path] = c
		p.v3Paths = append(p.v3Paths, path)
	}
	for _, r := range p.custom {
		if path := openAPIV3Path(schema.GroupVersion{Group: r.group, Version: r.version}); !slices.Contains(p.v3Paths, path) {
			p.v3Paths = append(p.v3Paths, path)
		}
	}
	return p, nil
}

// v2 builds the v2 document.
func (p *openAPIPlan) v2() (*spec.Swagger, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	routeContainers := make([]common.RouteContainer, 0, len(p.containers))
	for _, path := range p.v3Paths {
		if c, ok := p.containers[path]; ok {
			routeContainers = append(routeContainers, c)
		}
	}
	v2, err := builder.BuildOpenAPISpecFromRoutes(routeContainers, &common.Config{
		Info:                           p.info,
		GetDefinitions:                 openapidefs.GetOpenAPIDefinitions,
		GetDefinitionName:              p.namer.GetDefinitionName,
		GetOperationIDAndTagsFromRoute: routeIDAndTags,
		CommonResponses:                map[int]spec.Response{http.StatusUnauthorized: {ResponseProps: spec.ResponseProps{Description: "Unauthorized"}}},
		SecurityDefinitions: &spec.SecurityDefinitions{"BearerToken": &spec.SecurityScheme{SecuritySchemeProps: spec.SecuritySchemeProps{
			Type: "apiKey", Name: "authorization", In: "header", Description: "Bearer Token authentication"}}},
		DefaultSecurity: []map[string][]string{{"BearerToken": {}}},
	})
	if err != nil {
		return nil, fmt.Errorf("apiserver: OpenAPI v2: %w", err)
	}
	// As kube-apiserver serves v2: without defaults, which v2 clients misread.
	v2.Definitions = handler.PruneDefaults(v2.Definitions)
	if err := addCustomResourceV2(p.custom, &v2); err != nil {
		return nil, err
	}
	return v2, nil
}

// v3Config configures one v3 build. Each gets definitions of its own: the builder writes
// into the extensions of those it uses, and a document's schemas keep them, so definitions
// shared between builds would be written by one while another document is encoded.
func (p *openAPIPlan) v3Config() *common.OpenAPIV3Config {
	definitions := openapidefs.GetOpenAPIDefinitions(func(name string) spec.Ref {
		defName, _ := p.namer.GetDefinitionName(name)
		return spec.MustCreateRef("#/components/schemas/" + common.EscapeJsonPointer(defName))
	})
	return &common.OpenAPIV3Config{
		Info:                           p.info,
		Definitions:                    definitions,
		GetDefinitionName:              p.namer.GetDefinitionName,
		GetOperationIDAndTagsFromRoute: routeIDAndTags,
		CommonResponses:                map[int]*spec3.Response{http.StatusUnauthorized: {ResponseProps: spec3.ResponseProps{Description: "Unauthorized"}}},
		SecuritySchemes: spec3.SecuritySchemes{"BearerToken": &spec3.SecurityScheme{SecuritySchemeProps: spec3.SecuritySchemeProps{
			Type: "apiKey", Name: "authorization", In: "header", Description: "Bearer Token authentication"}}},
	}
}

// v3 builds the v3 document of the group version at path (api/v1, apis/apps/v1).
func (p *openAPIPlan) v3(path string) (*spec3.OpenAPI, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var custom []*resource
	for _, r := range p.custom {
		if openAPIV3Path(schema.GroupVersion{Group: r.group, Version: r.version}) == path {
			custom = append(custom, r)
		}
	}
	if len(custom) > 0 {
		return customV3(path, custom)
	}
	c, ok := p.containers[path]
	if !ok {
		return nil, fmt.Errorf("apiserver: no OpenAPI v3 document at %s", path)
	}
	doc, err := builder3.BuildOpenAPISpecFromRoutes([]common.RouteContainer{c}, p.v3Config())
	if err != nil {
		return nil, fmt.Errorf("apiserver: OpenAPI v3 of %s: %w", c.gv, err)
	}
	return doc, nil
}

// v3Index is the v3 root: every group version's URL with the hash of its document encoded
// as handler3 encodes it, each document built and dropped in turn.
func (p *openAPIPlan) v3Index() ([]byte, error) {
	index := handler3.OpenAPIV3Discovery{Paths: make(map[string]handler3.OpenAPIV3DiscoveryGroupVersion, len(p.v3Paths))}
	for _, path := range p.v3Paths {
		doc, err := p.v3(path)
		if err != nil {
			return nil, err
		}
		encoded, err := json.Marshal(doc)
		if err != nil {
			return nil, fmt.Errorf("apiserver: OpenAPI v3 of %s: %w", path, err)
		}
		index.Paths[path] = handler3.OpenAPIV3DiscoveryGroupVersion{ServerRelativeURL: v3URL(path, openAPIHash(encoded))}
	}
	return json.Marshal(index)
}

// schemas are the v3 schemas of every document by definition name, as the documents'
// components hold them, without building the documents: the definitions of every type the
// routes send or receive, and the custom resources' kinds.
func (p *openAPIPlan) schemas() (map[string]*spec.Schema, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var names []string
	seen := map[string]bool{}
	add := func(sample any) {
		if sample == nil {
			return
		}
		if name := util.GetCanonicalTypeName(sample); !seen[name] {
			seen[name] = true
			names = append(names, name)
		}
	}
	for _, path := range p.v3Paths {
		c, ok := p.containers[path]
		if !ok {
			continue
		}
		for _, r := range c.Routes() {
			add(r.RequestPayloadSample())
			add(r.ResponsePayloadSample())
			for _, resp := range r.StatusCodeResponses() {
				add(resp.Model())
			}
		}
	}
	out, err := builder3.BuildOpenAPIDefinitionsForResources(p.v3Config(), names...)
	if err != nil {
		return nil, fmt.Errorf("apiserver: OpenAPI v3 schemas: %w", err)
	}
	for _, r := range p.custom {
		s3, err := crdbuilder.BuildOpenAPIV3(r.custom.crd, r.version, crdbuilder.Options{IncludeSelectableFields: true})
		if err != nil {
			return nil, fmt.Errorf("apiserver: OpenAPI v3 of %s %s: %w", r.custom.crd.Name, r.version, err)
		}
		if s3.Components == nil {
			continue
		}
		// A custom resource's document repeats the types it shares with the built-in
		// kinds (ObjectMeta, DeleteOptions): the generated definitions of those win.
		for name, s := range s3.Components.Schemas {
			if _, ok := out[name]; !ok {
				out[name] = s
			}
		}
	}
	return out, nil
}

// buildOpenAPI builds the v2 document and the v3 document of every group version (keyed
// by its path below /openapi/v3/) of resources and the review APIs, all at once.
func buildOpenAPI(all []*resource) (*spec.Swagger, map[string]*spec3.OpenAPI, error) {
	p, err := planOpenAPI(all)
	if err != nil {
		return nil, nil, err
	}
	v2, err := p.v2()
	if err != nil {
		return nil, nil, err
	}
	v3 := make(map[string]*spec3.OpenAPI, len(p.v3Paths))
	for _, path := range p.v3Paths {
		if v3[path], err = p.v3(path); err != nil {
			return nil, nil, err
		}
	}
	return v2, v3, nil
}

// addCustomResourceV2 merges the custom resources into the v2 document, described from
// their definitions' schemas with apiextensions' own builder as kube-apiserver publishes
// them: the definition's value validations (required, enum, pattern, …) kept, only its
// defaults lost.
func addCustomResourceV2(custom []*resource, v2 **spec.Swagger) error {
	var v2Specs []*spec.Swagger
	for _, r := range custom {
		crd, version := r.custom.crd, r.version
		s2, err := crdbuilder.BuildOpenAPIV2(crd, version, crdbuilder.Options{V2: true, IncludeSelectableFields: true})
		if err != nil {
			return fmt.Errorf("apiserver: OpenAPI v2 of %s %s: %w", crd.Name, version, err)
		}
		s2.Definitions = handler.PruneDefaults(s2.Definitions)
		v2Specs = append(v2Specs, s2)
	}
	if len(v2Specs) == 0 {
		return nil
	}
	merged, err := crdbuilder.MergeSpecs(*v2, v2Specs...)
	if err != nil {
		return fmt.Errorf("apiserver: OpenAPI v2 of custom resources: %w", err)
	}
	*v2 = merged
	return nil
}

// customV3 is the v3 document of a group version of custom resources, one per group
// version as kube-apiserver publishes them.
func customV3(path string, custom []*resource) (*spec3.OpenAPI, error) {
	docs := make([]*spec3.OpenAPI, 0, len(custom))
	for _, r := range custom {
		s3, err := crdbuilder.BuildOpenAPIV3(r.custom.crd, r.version, crdbuilder.Options{IncludeSelectableFields: true})
		if err != nil {
			return nil, fmt.Errorf("apiserver: OpenAPI v3 of %s %s: %w", r.custom.crd.Name, r.version, err)
		}
		docs = append(docs, s3)
	}
	merged, err := crdbuilder.MergeSpecsV3(docs...)
	if err != nil {
		return nil, fmt.Errorf("apiserver: OpenAPI v3 of %s: %w", path, err)
	}
	return merged, nil
}

// openAPIV3Path is where a group version's v3 document is served below /openapi/v3/.
func openAPIV3Path(gv schema.GroupVersion) string {
	return strings.TrimPrefix(groupVersionPath(gv.Group, gv.Version), "/")
}
