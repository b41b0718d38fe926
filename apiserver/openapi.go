package apiserver

import (
	"fmt"
	"net/http"
	"strings"
	"sync"

	"github.com/NYTimes/gziphandler"
	"github.com/gorilla/mux"
	crdbuilder "k8s.io/apiextensions-apiserver/pkg/controller/openapi/builder"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/kube-openapi/pkg/builder"
	"k8s.io/kube-openapi/pkg/builder3"
	"k8s.io/kube-openapi/pkg/common"
	"k8s.io/kube-openapi/pkg/handler"
	"k8s.io/kube-openapi/pkg/handler3"
	"k8s.io/kube-openapi/pkg/spec3"
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

// openAPIDocs holds the documents of one registry revision. They are built on the first
// request after the registry changed (custom resources register kinds at run time) and
// served from kube-openapi's handlers, which encode each document once.
type openAPIDocs struct {
	reg *registry

	mu       sync.Mutex
	built    bool
	revision uint64 // of the registry the documents describe
	v2       *handler.OpenAPIService
	v2Serve  http.Handler
	v3       *handler3.OpenAPIService
	v3Serve  http.Handler
	v3Root   http.Handler
	v3Paths  map[string]bool // group-version paths below /openapi/v3/ (api/v1, apis/apps/v1)
	// The documents last built, as the handlers serve them.
	v2Spec *spec.Swagger
	v3Docs map[string]*spec3.OpenAPI
}

func newOpenAPIDocs(reg *registry) *openAPIDocs {
	return &openAPIDocs{reg: reg}
}

// pathHandler captures what kube-openapi's handlers register, for the router to serve.
type pathHandler map[string]http.Handler

func (p pathHandler) Handle(path string, h http.Handler)       { p[path] = h }
func (p pathHandler) HandlePrefix(path string, h http.Handler) { p[path] = h }

// sync rebuilds the documents if the registry changed since they were built.
func (d *openAPIDocs) sync() error {
	// The revision is read before the resources, so a registration racing with the build
	// leaves a newer revision behind and the next request builds again.
	rev := d.reg.currentRevision()
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.built && d.revision == rev {
		return nil
	}
	v2, v3, err := buildOpenAPI(d.reg.resources())
	if err != nil {
		return err
	}
	if d.v2 == nil {
		d.v2 = handler.NewOpenAPIService(v2)
		h := pathHandler{}
		d.v2.RegisterOpenAPIVersionedService("/openapi/v2", h)
		d.v2Serve = h["/openapi/v2"]
		d.v3 = handler3.NewOpenAPIService()
		d.v3Root = gziphandler.GzipHandler(http.HandlerFunc(d.v3.HandleDiscovery))
		d.v3Serve = gziphandler.GzipHandler(http.HandlerFunc(d.v3.HandleGroupVersion))
	} else if err := d.v2.UpdateSpec(v2); err != nil {
		return err
	}
	for path := range d.v3Paths {
		if _, ok := v3[path]; !ok {
			d.v3.DeleteGroupVersion(path)
		}
	}
	d.v3Paths = make(map[string]bool, len(v3))
	for path, doc := range v3 {
		d.v3.UpdateGroupVersion(path, doc)
		d.v3Paths[path] = true
	}
	d.v2Spec, d.v3Docs = v2, v3
	d.built, d.revision = true, rev
	return nil
}

// v3Served reports whether path (api/v1, apis/apps/v1) has a v3 document.
func (d *openAPIDocs) v3Served(path string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.v3Paths[path]
}

func (s *Server) serveOpenAPIV2(w http.ResponseWriter, r *http.Request) {
	if err := s.openapi.sync(); err != nil {
		writeError(w, r, err, groupResourceNone, "")
		return
	}
	s.openapi.v2Serve.ServeHTTP(w, r)
}

func (s *Server) serveOpenAPIRoot(w http.ResponseWriter, r *http.Request) {
	if err := s.openapi.sync(); err != nil {
		writeError(w, r, err, groupResourceNone, "")
		return
	}
	s.openapi.v3Root.ServeHTTP(w, r)
}

func (s *Server) serveOpenAPIGroupVersion(w http.ResponseWriter, r *http.Request) {
	if err := s.openapi.sync(); err != nil {
		writeError(w, r, err, groupResourceNone, "")
		return
	}
	// kube-openapi's handler answers an unknown group version with an empty 200.
	if !s.openapi.v3Served(mux.Vars(r)["path"]) {
		writeError(w, r, notFoundPath(r), groupResourceNone, "")
		return
	}
	s.openapi.v3Serve.ServeHTTP(w, r)
}

// buildOpenAPI builds the v2 document and the v3 document of every group version (keyed
// by its path below /openapi/v3/) of resources and the review APIs.
func buildOpenAPI(all []*resource) (*spec.Swagger, map[string]*spec3.OpenAPI, error) {
	// Custom resources are described from their definitions' schemas, below.
	var resources, custom []*resource
	for _, r := range all {
		if r.custom != nil {
			custom = append(custom, r)
		} else {
			resources = append(resources, r)
		}
	}
	// Definitions read for parameter descriptions only: no reference is followed.
	plain := openapidefs.GetOpenAPIDefinitions(func(name string) spec.Ref { return spec.Ref{} })
	b := newRouteBuilder(resources, plain)
	containers, err := b.build()
	if err != nil {
		return nil, nil, err
	}
	namer := b.definitionNamer()
	info := &spec.Info{InfoProps: spec.InfoProps{Title: "Kubernetes", Version: kubernetesVersion}}

	routeContainers := make([]common.RouteContainer, len(containers))
	for i, c := range containers {
		routeContainers[i] = c
	}
	v2, err := builder.BuildOpenAPISpecFromRoutes(routeContainers, &common.Config{
		Info:                           info,
		GetDefinitions:                 openapidefs.GetOpenAPIDefinitions,
		GetDefinitionName:              namer.GetDefinitionName,
		GetOperationIDAndTagsFromRoute: routeIDAndTags,
		CommonResponses:                map[int]spec.Response{http.StatusUnauthorized: {ResponseProps: spec.ResponseProps{Description: "Unauthorized"}}},
		SecurityDefinitions: &spec.SecurityDefinitions{"BearerToken": &spec.SecurityScheme{SecuritySchemeProps: spec.SecuritySchemeProps{
			Type: "apiKey", Name: "authorization", In: "header", Description: "Bearer Token authentication"}}},
		DefaultSecurity: []map[string][]string{{"BearerToken": {}}},
	})
	if err != nil {
		return nil, nil, fmt.Errorf("apiserver: OpenAPI v2: %w", err)
	}
	// As kube-apiserver serves v2: without defaults, which v2 clients misread.
	v2.Definitions = handler.PruneDefaults(v2.Definitions)

	// One set of v3 definitions, with v3 references, shared by every group version's build.
	v3Definitions := openapidefs.GetOpenAPIDefinitions(func(name string) spec.Ref {
		defName, _ := namer.GetDefinitionName(name)
		return spec.MustCreateRef("#/components/schemas/" + common.EscapeJsonPointer(defName))
	})
	v3 := make(map[string]*spec3.OpenAPI, len(containers))
	for _, c := range containers {
		doc, err := builder3.BuildOpenAPISpecFromRoutes([]common.RouteContainer{c}, &common.OpenAPIV3Config{
			Info:                           info,
			Definitions:                    v3Definitions,
			GetDefinitionName:              namer.GetDefinitionName,
			GetOperationIDAndTagsFromRoute: routeIDAndTags,
			CommonResponses:                map[int]*spec3.Response{http.StatusUnauthorized: {ResponseProps: spec3.ResponseProps{Description: "Unauthorized"}}},
			SecuritySchemes: spec3.SecuritySchemes{"BearerToken": &spec3.SecurityScheme{SecuritySchemeProps: spec3.SecuritySchemeProps{
				Type: "apiKey", Name: "authorization", In: "header", Description: "Bearer Token authentication"}}},
		})
		if err != nil {
			return nil, nil, fmt.Errorf("apiserver: OpenAPI v3 of %s: %w", c.gv, err)
		}
		v3[openAPIV3Path(c.gv)] = doc
	}
	if err := addCustomResourceOpenAPI(custom, &v2, v3); err != nil {
		return nil, nil, err
	}
	return v2, v3, nil
}

// addCustomResourceOpenAPI describes custom resources from their definitions' schemas with
// apiextensions' own builder, as kube-apiserver publishes them: merged into the v2
// document, and one v3 document per group version.
func addCustomResourceOpenAPI(custom []*resource, v2 **spec.Swagger, v3 map[string]*spec3.OpenAPI) error {
	var v2Specs []*spec.Swagger
	byGV := map[string][]*spec3.OpenAPI{}
	for _, r := range custom {
		crd, version := r.custom.crd, r.version
		// The v2 schema keeps the definition's value validations (required, enum,
		// pattern, …) and loses only its defaults, as kube-apiserver publishes it.
		s2, err := crdbuilder.BuildOpenAPIV2(crd, version, crdbuilder.Options{V2: true, IncludeSelectableFields: true})
		if err != nil {
			return fmt.Errorf("apiserver: OpenAPI v2 of %s %s: %w", crd.Name, version, err)
		}
		s2.Definitions = handler.PruneDefaults(s2.Definitions)
		v2Specs = append(v2Specs, s2)
		s3, err := crdbuilder.BuildOpenAPIV3(crd, version, crdbuilder.Options{IncludeSelectableFields: true})
		if err != nil {
			return fmt.Errorf("apiserver: OpenAPI v3 of %s %s: %w", crd.Name, version, err)
		}
		path := openAPIV3Path(schema.GroupVersion{Group: r.group, Version: r.version})
		byGV[path] = append(byGV[path], s3)
	}
	if len(v2Specs) > 0 {
		merged, err := crdbuilder.MergeSpecs(*v2, v2Specs...)
		if err != nil {
			return fmt.Errorf("apiserver: OpenAPI v2 of custom resources: %w", err)
		}
		*v2 = merged
	}
	for path, docs := range byGV {
		merged, err := crdbuilder.MergeSpecsV3(docs...)
		if err != nil {
			return fmt.Errorf("apiserver: OpenAPI v3 of %s: %w", path, err)
		}
		v3[path] = merged
	}
	return nil
}

// openAPIV3Path is where a group version's v3 document is served below /openapi/v3/.
func openAPIV3Path(gv schema.GroupVersion) string {
	return strings.TrimPrefix(groupVersionPath(gv.Group, gv.Version), "/")
}
