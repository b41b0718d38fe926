package auth

import (
	"fmt"
	"strconv"
	"strings"
)

// Attributes describe what a request wants to do.
type Attributes struct {
	Verb        string // get, list, watch, create, update, patch, delete, deletecollection
	Group       string
	Resource    string
	Subresource string
	Namespace   string
	Name        string
	// NonResourcePath is set for requests outside the resource tree (/metrics, /openapi/v3...).
	NonResourcePath string
}

// Decision is an authorizer's answer.
type Decision int

// Decisions. NodeObjectCheck means a node may act only if the existing object belongs to
// it: the caller must call AuthorizeNodeObject with the object's node name.
const (
	Deny Decision = iota
	Allow
	NodeObjectCheck
)

// Authorizer decides by group membership, and for nodes by what the request touches.
type Authorizer struct {
	AdminGroups    []string
	ReadOnlyGroups []string
}

var readVerbs = map[string]bool{"get": true, "list": true, "watch": true}

// Authorize returns the decision for u doing a, and a reason when denied.
func (z *Authorizer) Authorize(u *User, a Attributes) (Decision, string) {
	if u.InGroup(z.AdminGroups...) {
		return Allow, ""
	}
	if a.NonResourcePath != "" {
		// Discovery, OpenAPI and version are public to every authenticated user, as
		// kube-apiserver's system:discovery role makes them; metrics are not.
		if a.NonResourcePath == "/metrics" {
			if u.InGroup(z.ReadOnlyGroups...) {
				return Allow, ""
			}
			return Deny, "only administrators and viewers may read metrics"
		}
		// Profiles show memory contents and the command line, and a CPU profile or trace
		// costs the server: of kube-apiserver's default roles only cluster-admin reaches /debug/.
		if a.NonResourcePath == "/debug" || strings.HasPrefix(a.NonResourcePath, "/debug/") {
			return Deny, "only administrators may read profiles"
		}
		return Allow, ""
	}
	if u.InGroup(z.ReadOnlyGroups...) && readVerbs[a.Verb] {
		return Allow, ""
	}
	if u.InGroup(NodesGroup) {
		return authorizeNode(u, a)
	}
	return Deny, ""
}

// NodeNames says which node names a node identity may act as.
func NodeNames(u *User) func(string) bool {
	switch {
	case strings.HasPrefix(u.Name, NodeUserPrefix):
		name := strings.TrimPrefix(u.Name, NodeUserPrefix)
		return func(n string) bool { return n == name }
	case strings.HasPrefix(u.Name, FleetUserPrefix):
		prefix := strings.TrimPrefix(u.Name, FleetUserPrefix) + "-"
		return func(n string) bool {
			rest, ok := strings.CutPrefix(n, prefix)
			if !ok || rest == "" {
				return false
			}
			_, err := strconv.ParseUint(rest, 10, 32)
			return err == nil
		}
	}
	return func(string) bool { return false }
}

func authorizeNode(u *User, a Attributes) (Decision, string) {
	owns := NodeNames(u)
	switch {
	case a.Group == "" && a.Resource == "nodes":
		if readVerbs[a.Verb] {
			return Allow, ""
		}
		if (a.Verb == "update" || a.Verb == "patch") && owns(a.Name) {
			return Allow, ""
		}
		if a.Verb == "create" {
			return NodeObjectCheck, "" // the name is in the body
		}
		return Deny, fmt.Sprintf("node identity %q may only change its own Node", u.Name)
	case a.Group == "" && a.Resource == "pods":
		if readVerbs[a.Verb] {
			return Allow, ""
		}
		// As Kubernetes' NodeRestriction: a node reports pod status and deletes pods it has
		// stopped, but never changes a pod's spec or metadata.
		if a.Name != "" && (((a.Verb == "update" || a.Verb == "patch") && a.Subresource == "status") ||
			(a.Verb == "delete" && a.Subresource == "")) {
			return NodeObjectCheck, ""
		}
		return Deny, fmt.Sprintf("node identity %q may only change pods bound to it", u.Name)
	case a.Group == "coordination.k8s.io" && a.Resource == "leases":
		if a.Namespace == "kube-node-lease" && readVerbs[a.Verb] {
			return Allow, ""
		}
		if a.Namespace == "kube-node-lease" && a.Verb == "create" {
			return NodeObjectCheck, "" // the name is in the body
		}
		if a.Namespace == "kube-node-lease" && (a.Verb == "update" || a.Verb == "patch") && owns(a.Name) {
			return Allow, ""
		}
		return Deny, fmt.Sprintf("node identity %q may only use its own Lease in kube-node-lease", u.Name)
	case a.Group == "" && a.Resource == "events":
		if a.Verb == "create" || a.Verb == "update" || a.Verb == "patch" || readVerbs[a.Verb] {
			return Allow, ""
		}
	case a.Group == "" && a.Resource == "namespaces", a.Group == "apps":
		if readVerbs[a.Verb] {
			return Allow, ""
		}
	}
	return Deny, fmt.Sprintf("node identity %q may not %s %s", u.Name, a.Verb, a.Resource)
}

// AuthorizeNodeObject finishes a NodeObjectCheck: the node may act on an object that
// belongs to nodeName (a pod's spec.nodeName, a Node's or Lease's name) only if it owns
// that name.
func AuthorizeNodeObject(u *User, nodeName string) (Decision, string) {
	if nodeName != "" && NodeNames(u)(nodeName) {
		return Allow, ""
	}
	return Deny, fmt.Sprintf("node identity %q may only change objects of its own node", u.Name)
}
