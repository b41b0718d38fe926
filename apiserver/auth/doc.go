// Package auth is who a request comes from and what it may do, with no storage of its own:
// static bearer tokens and signed ServiceAccount tokens (authentication), and the
// authorizers kube-apiserver chains with --authorization-mode=Node,RBAC — the privileged
// groups, the node authorizer (a node changes only its own Node, Lease and pods) and RBAC
// over a snapshot of the RBAC objects the API server hands it. The bootstrap policy, the
// roles and bindings every cluster starts with, is defined here too.
package auth
