package apiserver

import (
	"context"
	"net/http"
	"strings"

	"github.com/gorilla/mux"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/miniplane/miniplane/apiserver/auth"
)

// reviewAPI is a create-only resource that answers a question instead of storing an
// object: who am I, may I (or may someone) do this, what may I do, whose token is this.
// `kubectl auth whoami`, `kubectl auth can-i` (with --list, and with --as) ask them.
type reviewAPI struct {
	group, version, resource, kind string
	// namespaced reviews are served under /namespaces/<ns>/ and answer about that
	// namespace (LocalSubjectAccessReview).
	namespaced bool
	newFunc    func() runtime.Object
	// answer fills obj's status; namespace is the URL's, for namespaced reviews.
	answer func(s *Server, ctx context.Context, u *auth.User, namespace string, obj runtime.Object) (runtime.Object, error)
}

var reviewAPIs = []reviewAPI{
	{
		group: "authentication.k8s.io", version: "v1", resource: "selfsubjectreviews", kind: "SelfSubjectReview",
		newFunc: func() runtime.Object { return &authenticationv1.SelfSubjectReview{} },
		answer: func(_ *Server, _ context.Context, u *auth.User, _ string, obj runtime.Object) (runtime.Object, error) {
			r := obj.(*authenticationv1.SelfSubjectReview)
			r.Status.UserInfo = userInfo(u)
			return r, nil
		},
	},
	{
		group: "authentication.k8s.io", version: "v1", resource: "tokenreviews", kind: "TokenReview",
		newFunc: func() runtime.Object { return &authenticationv1.TokenReview{} },
		answer:  answerTokenReview,
	},
	{
		group: "authorization.k8s.io", version: "v1", resource: "selfsubjectaccessreviews", kind: "SelfSubjectAccessReview",
		newFunc: func() runtime.Object { return &authorizationv1.SelfSubjectAccessReview{} },
		answer: func(s *Server, _ context.Context, u *auth.User, _ string, obj runtime.Object) (runtime.Object, error) {
			r := obj.(*authorizationv1.SelfSubjectAccessReview)
			status, err := s.accessReview("SelfSubjectAccessReview", u, r.Spec.ResourceAttributes, r.Spec.NonResourceAttributes)
			r.Status = status
			return r, err
		},
	},
	{
		group: "authorization.k8s.io", version: "v1", resource: "selfsubjectrulesreviews", kind: "SelfSubjectRulesReview",
		newFunc: func() runtime.Object { return &authorizationv1.SelfSubjectRulesReview{} },
		answer: func(s *Server, _ context.Context, u *auth.User, _ string, obj runtime.Object) (runtime.Object, error) {
			r := obj.(*authorizationv1.SelfSubjectRulesReview)
			if r.Spec.Namespace == "" {
				return nil, badRequest("no namespace on request")
			}
			r.Status = s.rulesReview(u, r.Spec.Namespace)
			return r, nil
		},
	},
	{
		group: "authorization.k8s.io", version: "v1", resource: "subjectaccessreviews", kind: "SubjectAccessReview",
		newFunc: func() runtime.Object { return &authorizationv1.SubjectAccessReview{} },
		answer: func(s *Server, _ context.Context, _ *auth.User, _ string, obj runtime.Object) (runtime.Object, error) {
			r := obj.(*authorizationv1.SubjectAccessReview)
			subject, err := reviewSubject("SubjectAccessReview", r.Spec)
			if err != nil {
				return nil, err
			}
			status, err := s.accessReview("SubjectAccessReview", subject, r.Spec.ResourceAttributes, r.Spec.NonResourceAttributes)
			r.Status = status
			return r, err
		},
	},
	{
		group: "authorization.k8s.io", version: "v1", resource: "localsubjectaccessreviews", kind: "LocalSubjectAccessReview",
		namespaced: true,
		newFunc:    func() runtime.Object { return &authorizationv1.LocalSubjectAccessReview{} },
		answer: func(s *Server, _ context.Context, _ *auth.User, namespace string, obj runtime.Object) (runtime.Object, error) {
			r := obj.(*authorizationv1.LocalSubjectAccessReview)
			if r.Namespace != "" && r.Namespace != namespace {
				return nil, badRequest("the namespace of the provided object does not match the namespace sent on the request")
			}
			r.Namespace = namespace
			ra := r.Spec.ResourceAttributes
			switch {
			case r.Spec.NonResourceAttributes != nil:
				return nil, invalidReview("LocalSubjectAccessReview", field.NewPath("spec", "nonResourceAttributes"), r.Spec.NonResourceAttributes, "disallowed on this kind of request")
			case ra == nil:
				return nil, invalidReview("LocalSubjectAccessReview", field.NewPath("spec", "resourceAttributes"), nil, "exactly one of nonResourceAttributes or resourceAttributes must be specified")
			case ra.Namespace != "" && ra.Namespace != namespace:
				return nil, badRequest("spec.resourceAttributes.namespace must match namespace: %s", namespace)
			}
			ra.Namespace = namespace
			subject, err := reviewSubject("LocalSubjectAccessReview", r.Spec)
			if err != nil {
				return nil, err
			}
			status, err := s.accessReview("LocalSubjectAccessReview", subject, ra, nil)
			r.Status = status
			return r, err
		},
	},
}

// reviewSubject is the user a SubjectAccessReview asks about, exactly as given (no
// system:authenticated added, as upstream).
func reviewSubject(kind string, spec authorizationv1.SubjectAccessReviewSpec) (*auth.User, error) {
	if spec.User == "" && len(spec.Groups) == 0 {
		return nil, invalidReview(kind, field.NewPath("spec", "user"), spec.User, "at least one of user or group must be specified")
	}
	u := &auth.User{Name: spec.User, UID: spec.UID, Groups: spec.Groups}
	if len(spec.Extra) > 0 {
		u.Extra = map[string][]string{}
		for k, v := range spec.Extra {
			u.Extra[k] = v
		}
	}
	return u, nil
}

// accessReview decides whether u may do what the attributes say. An action a node may
// take on its own objects only counts as allowed, as upstream's node authorizer answers
// it, with the restriction as the reason.
func (s *Server) accessReview(kind string, u *auth.User, ra *authorizationv1.ResourceAttributes, na *authorizationv1.NonResourceAttributes) (authorizationv1.SubjectAccessReviewStatus, error) {
	var a auth.Attributes
	spec := field.NewPath("spec")
	switch {
	case ra != nil && na != nil:
		return authorizationv1.SubjectAccessReviewStatus{}, invalidReview(kind, spec.Child("nonResourceAttributes"), na, "cannot be specified in combination with resourceAttributes")
	case ra != nil:
		a = auth.Attributes{Verb: ra.Verb, Group: ra.Group, Resource: ra.Resource, Subresource: ra.Subresource, Namespace: ra.Namespace, Name: ra.Name}
	case na != nil:
		a = auth.Attributes{Verb: na.Verb, NonResourcePath: na.Path}
		if a.NonResourcePath == "" {
			return authorizationv1.SubjectAccessReviewStatus{}, invalidReview(kind, spec.Child("nonResourceAttributes", "path"), na.Path, "must not be empty")
		}
	default:
		return authorizationv1.SubjectAccessReviewStatus{}, invalidReview(kind, spec.Child("resourceAttributes"), nil, "exactly one of nonResourceAttributes or resourceAttributes must be specified")
	}
	switch d, reason := s.authorize(u, a); d {
	case auth.Allow:
		return authorizationv1.SubjectAccessReviewStatus{Allowed: true, Reason: reason}, nil
	case auth.NodeObjectCheck:
		return authorizationv1.SubjectAccessReviewStatus{Allowed: true, Reason: "allowed only on objects of the node's own"}, nil
	default:
		return authorizationv1.SubjectAccessReviewStatus{Reason: reason}, nil
	}
}

// invalidReview is a review's 422, as the authorization API's validation words it.
func invalidReview(kind string, p *field.Path, value any, msg string) error {
	return apierrors.NewInvalid(authorizationv1.SchemeGroupVersion.WithKind(kind).GroupKind(), "", field.ErrorList{field.Invalid(p, value, msg)})
}

// rulesReview lists what u may do in namespace.
func (s *Server) rulesReview(u *auth.User, namespace string) authorizationv1.SubjectRulesReviewStatus {
	rules, incomplete := s.authz.RulesFor(u, namespace)
	status := authorizationv1.SubjectRulesReviewStatus{Incomplete: incomplete,
		ResourceRules: []authorizationv1.ResourceRule{}, NonResourceRules: []authorizationv1.NonResourceRule{}}
	for _, r := range rules {
		if len(r.NonResourceURLs) > 0 {
			status.NonResourceRules = append(status.NonResourceRules, authorizationv1.NonResourceRule{Verbs: r.Verbs, NonResourceURLs: r.NonResourceURLs})
			continue
		}
		status.ResourceRules = append(status.ResourceRules, authorizationv1.ResourceRule{Verbs: r.Verbs, APIGroups: r.APIGroups,
			Resources: r.Resources, ResourceNames: r.ResourceNames})
	}
	return status
}

// answerTokenReview authenticates the token a TokenReview carries, for the audiences it
// names (the API server's own when it names none).
func answerTokenReview(s *Server, ctx context.Context, _ *auth.User, _ string, obj runtime.Object) (runtime.Object, error) {
	r := obj.(*authenticationv1.TokenReview)
	if r.Spec.Token == "" {
		return nil, badRequest("spec.token: Required value: token must not be empty")
	}
	audiences := r.Spec.Audiences
	if len(audiences) == 0 {
		audiences = s.cfg.Audiences()
	}
	u, matched, err := s.authenticateToken(ctx, r.Spec.Token, audiences)
	if err != nil {
		r.Status = authenticationv1.TokenReviewStatus{Error: strings.TrimPrefix(err.Error(), errUnauthenticated.Error()+": ")}
		return r, nil
	}
	r.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: userInfo(u), Audiences: matched}
	return r, nil
}

func (api reviewAPI) gvk() schema.GroupVersionKind {
	return schema.GroupVersionKind{Group: api.group, Version: api.version, Kind: api.kind}
}

// path is where the review is served (with {namespace} for namespaced ones).
func (api reviewAPI) path() string {
	p := groupVersionPath(api.group, api.version)
	if api.namespaced {
		p += "/namespaces/{namespace}"
	}
	return p + "/" + api.resource
}

// serveReview answers a POST to a review API, once the caller may create it.
func (s *Server) serveReview(api reviewAPI) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		namespace := mux.Vars(r)["namespace"]
		st := stateFrom(r.Context())
		st.verb, st.resource = "create", api.resource
		gr := schema.GroupResource{Group: api.group, Resource: api.resource}
		c := &call{s: s, w: w, r: r, user: st.user}
		c.info = &requestInfo{verb: "create", namespace: namespace,
			res: &resource{group: api.group, version: api.version, name: api.resource, kind: api.kind, namespaced: api.namespaced}}
		st.info = c.info
		a := auth.Attributes{Verb: "create", Group: api.group, Resource: api.resource, Namespace: namespace}
		d, reason := s.authorize(st.user, a)
		st.decision, st.reason = decisionAnnotation(d), reason
		if d != auth.Allow {
			writeError(w, r, forbiddenError(st.user, a, reason), gr, "")
			return
		}
		var err error
		if c.out, err = negotiateObject(r); err != nil {
			writeError(w, r, err, gr, "")
			return
		}
		data, err := c.readBody()
		if err != nil {
			writeError(w, r, err, gr, "")
			return
		}
		obj := api.newFunc()
		if err := c.decodeObject(data, api.gvk(), obj); err != nil {
			writeError(w, r, err, gr, "")
			return
		}
		out, err := api.answer(s, r.Context(), st.user, namespace, obj)
		if err != nil {
			writeError(w, r, err, gr, "")
			return
		}
		out.GetObjectKind().SetGroupVersionKind(api.gvk())
		if m, ok := out.(metav1.ObjectMetaAccessor); ok {
			m.GetObjectMeta().SetCreationTimestamp(metav1.NewTime(s.clock.Now().Truncate(1e9)))
		}
		c.respond(http.StatusCreated, out, nil)
	}
}

// reviewGroups are the API groups of the review APIs, for discovery.
func reviewGroups() []string {
	seen := map[string]bool{}
	var out []string
	for _, api := range reviewAPIs {
		if !seen[api.group] {
			seen[api.group] = true
			out = append(out, api.group)
		}
	}
	return out
}

func reviewResources(group, version string) []metav1.APIResource {
	var out []metav1.APIResource
	for _, api := range reviewAPIs {
		if api.group == group && api.version == version {
			out = append(out, metav1.APIResource{Name: api.resource, Kind: api.kind, Namespaced: api.namespaced, Verbs: metav1.Verbs{"create"}})
		}
	}
	return out
}

func reviewGroupVersion(group string) (string, bool) {
	for _, api := range reviewAPIs {
		if api.group == group {
			return api.version, true
		}
	}
	return "", false
}
