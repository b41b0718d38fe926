// Package rootcapublisher keeps the ConfigMap kube-root-ca.crt in every namespace, holding
// the cluster's CA bundle under ca.crt, as kube-controller-manager's root-ca-cert-publisher
// does. Pods read it through the projected volume the API server's ServiceAccount admission
// mounts at /var/run/secrets/kubernetes.io/serviceaccount, and workloads that talk to the API
// server mount it by name.
//
// A namespace gets the ConfigMap when it is created; a deleted one is created again, and one
// whose data or description annotation was changed is put back. A namespace that is going
// away is left alone.
package rootcapublisher
