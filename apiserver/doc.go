// Package apiserver serves Kubernetes objects kept in etcd over the Kubernetes REST API,
// wire-compatible enough that client-go and kubectl work unchanged: discovery, OpenAPI v2
// and v3 documents with every served kind's schema (docs/openapi.md), server-side field
// validation, get/list/watch/create/update/patch/delete/deletecollection, the status and
// binding subresources, server-side tables for kubectl get, bearer-token
// authentication and group/node authorization, and Prometheus metrics.
//
// Watches (and most lists) are served from a watch cache: one etcd watch per resource,
// fanned out in memory, so thousands of watchers cost one etcd watch.
//
// The request path is: middleware (recovery, metrics, authentication) → requestInfo
// (which resource, verb, namespace, name) → authorization → the verb's handler (one file
// each) → the resource's strategy (defaulting, validation, status rules) → store.
//
// What differs between kinds lives in the registry (registry.go): one entry per resource
// and its strategy. The verb handlers never compare resource names, so a new kind is one
// registration and its strategy.
package apiserver
