package apiserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sort"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/miniplane/miniplane/store"
)

// What every cluster has from its first start, besides the bootstrap namespaces: the
// system PriorityClasses, a default ServiceAccount in every namespace, and the
// `kubernetes` Service in default with endpoints naming every running API server.

// kubernetesService is the name of the Service, its Endpoints and its EndpointSlice.
const kubernetesService = "kubernetes"

// Master leases: each API server keeps a key <prefix>/masterleases/<ip> alive with a TTL,
// and the `kubernetes` endpoints list the addresses whose lease lives, as kube-apiserver's
// lease endpoint reconciler does. A server that stops (or dies) drops out within the TTL.
const (
	masterLeaseTTL      = 15 * time.Second
	masterLeaseInterval = 10 * time.Second
)

// bootstrapObjects creates what every cluster has, leaving alone what exists.
func (s *Server) bootstrapObjects(ctx context.Context) error {
	pcs := s.reg.lookupGroupResource(priorityClassesResource)
	for i := range systemPriorityClasses {
		pc := systemPriorityClasses[i].DeepCopy()
		if _, err := s.createStored(ctx, pcs, pc, createOptions{manager: serverFieldManager}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("bootstrap priority class %s: %w", pc.Name, err)
		}
	}
	for _, obj := range s.cached(corev1.Resource("namespaces"), "") {
		if ns := obj.(*corev1.Namespace); ns.DeletionTimestamp == nil {
			s.ensureDefaultServiceAccount(ctx, ns.Name)
		}
	}
	// Namespaces created by the bootstrap just now may not be in the cache yet.
	for _, name := range bootstrapNamespaces {
		s.ensureDefaultServiceAccount(ctx, name)
	}
	return s.ensureKubernetesService(ctx)
}

// ensureKubernetesService creates the `kubernetes` Service on the first address of the
// service range, its port 443 leading to the API server's port.
func (s *Server) ensureKubernetesService(ctx context.Context) error {
	if s.services == nil {
		return nil
	}
	res := s.reg.lookupGroupResource(corev1.Resource("services"))
	if _, err := s.lookup(ctx, res.groupResource(), metav1.NamespaceDefault, kubernetesService); !apierrors.IsNotFound(err) {
		return err // there already, or unreadable
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: kubernetesService,
			Labels: map[string]string{"component": "apiserver", "provider": "kubernetes"}},
		Spec: corev1.ServiceSpec{
			Type:      corev1.ServiceTypeClusterIP,
			ClusterIP: s.services.firstIP(),
			Ports: []corev1.ServicePort{{Name: "https", Protocol: corev1.ProtocolTCP, Port: 443,
				TargetPort: intstr.FromInt32(int32(s.advertisedPort()))}},
		},
	}
	key := res.key(s.cfg.EtcdPrefix, metav1.NamespaceDefault, kubernetesService)
	var err error
	for attempt := 0; attempt < kubernetesServiceAttempts; attempt++ {
		_, err = s.createStored(ctx, res, svc.DeepCopy(), createOptions{manager: serverFieldManager})
		if err == nil || apierrors.IsAlreadyExists(err) {
			return nil
		}
		// Another API server starting at the same moment may have taken the address for the
		// Service it is creating: once that Service is there, nothing is left to do.
		if _, getErr := s.store.Get(ctx, key); getErr == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.clock.After(kubernetesServiceRetry):
		}
	}
	return fmt.Errorf("bootstrap service %s: %w", kubernetesService, err)
}

// A server retries the kubernetes Service this many times, this far apart, while another
// one's creation of it is under way.
const (
	kubernetesServiceAttempts = 10
	kubernetesServiceRetry    = 500 * time.Millisecond
)

// advertisedIP is the address the `kubernetes` endpoints give for this server.
func (s *Server) advertisedIP() string {
	if s.cfg.AdvertiseAddress != "" {
		return s.cfg.AdvertiseAddress
	}
	host, _, _ := net.SplitHostPort(s.cfg.Listen)
	if ip := net.ParseIP(host); ip != nil && !ip.IsUnspecified() {
		return ip.String()
	}
	if host == "localhost" {
		return "127.0.0.1"
	}
	// Listening on every address: name the first that others can reach.
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
			return n.IP.String()
		}
	}
	return "127.0.0.1"
}

// advertisedPort is the port this server serves HTTPS on.
func (s *Server) advertisedPort() int {
	if addr, ok := s.Addr().(*net.TCPAddr); ok && addr != nil {
		return addr.Port
	}
	_, port, _ := net.SplitHostPort(s.cfg.Listen)
	n, _ := strconv.Atoi(port)
	return n
}

func (s *Server) masterLeaseKey(ip string) string {
	return s.cfg.EtcdPrefix + "/masterleases/" + ip
}

// runKubernetesEndpoints keeps this server's master lease alive and the `kubernetes`
// endpoints current until ctx ends; then it drops the lease so the endpoints forget this
// server at once.
func (s *Server) runKubernetesEndpoints(ctx context.Context) {
	ip := s.advertisedIP()
	t := time.NewTicker(masterLeaseInterval)
	defer t.Stop()
	for {
		if err := s.reconcileKubernetesEndpoints(ctx, ip); err != nil && ctx.Err() == nil {
			s.log.Warn("kubernetes endpoints not reconciled", "err", err)
		}
		select {
		case <-ctx.Done():
			stop, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			defer cancel()
			_, _ = s.store.Delete(stop, s.masterLeaseKey(ip), nil, nil)
			_ = s.reconcileKubernetesEndpoints(stop, "")
			return
		case <-t.C:
		}
	}
}

// reconcileKubernetesEndpoints renews the lease of ip (none when ip is "") and writes the
// endpoints of every live lease.
func (s *Server) reconcileKubernetesEndpoints(ctx context.Context, ip string) error {
	if ip != "" {
		// kube-apiserver's master leases are Endpoints objects.
		lease := &corev1.Endpoints{ObjectMeta: metav1.ObjectMeta{Name: ip}}
		_, err := s.store.GuaranteedUpdate(ctx, s.masterLeaseKey(ip), func(cur runtime.Object) (runtime.Object, error) {
			return cur, nil
		}, store.UpdateOptions{TTL: masterLeaseTTL})
		if errors.Is(err, store.ErrNotFound) {
			_, err = s.store.Create(ctx, s.masterLeaseKey(ip), lease, masterLeaseTTL)
		}
		if err != nil && !errors.Is(err, store.ErrAlreadyExists) {
			return err
		}
	}
	list, err := s.store.List(ctx, s.cfg.EtcdPrefix+"/masterleases/", store.ListOptions{})
	if err != nil {
		return err
	}
	var ips []string
	for _, obj := range list.Items {
		ips = append(ips, obj.(*corev1.Endpoints).Name)
	}
	sort.Strings(ips)
	port := int32(s.advertisedPort())
	var subsets []corev1.EndpointSubset
	var slice []discoveryv1.Endpoint
	if len(ips) > 0 {
		ss := corev1.EndpointSubset{Ports: []corev1.EndpointPort{{Name: "https", Port: port, Protocol: corev1.ProtocolTCP}}}
		ready := true
		for _, a := range ips {
			ss.Addresses = append(ss.Addresses, corev1.EndpointAddress{IP: a})
			slice = append(slice, discoveryv1.Endpoint{Addresses: []string{a}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}})
		}
		subsets = []corev1.EndpointSubset{ss}
	}
	labels := map[string]string{discoveryv1.LabelSkipMirror: "true"}
	ep := &corev1.Endpoints{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: kubernetesService, Labels: labels}, Subsets: subsets}
	if err := s.putSystemObject(ctx, corev1.Resource("endpoints"), ep, func(cur runtime.Object) bool {
		return apiequality.Semantic.DeepEqual(cur.(*corev1.Endpoints).Subsets, subsets)
	}, func(cur runtime.Object) { cur.(*corev1.Endpoints).Subsets = subsets }); err != nil {
		return err
	}
	name, tcp := "https", corev1.ProtocolTCP
	ports := []discoveryv1.EndpointPort{{Name: &name, Port: &port, Protocol: &tcp}}
	es := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: kubernetesService,
			Labels: map[string]string{discoveryv1.LabelServiceName: kubernetesService}},
		AddressType: discoveryv1.AddressTypeIPv4, Endpoints: slice, Ports: ports,
	}
	return s.putSystemObject(ctx, discoveryv1.Resource("endpointslices"), es, func(cur runtime.Object) bool {
		c := cur.(*discoveryv1.EndpointSlice)
		return apiequality.Semantic.DeepEqual(c.Endpoints, slice) && apiequality.Semantic.DeepEqual(c.Ports, ports)
	}, func(cur runtime.Object) {
		c := cur.(*discoveryv1.EndpointSlice)
		c.Endpoints, c.Ports = slice, ports
	})
}

// putSystemObject creates obj, or brings the stored one in line with set unless current
// says it already is.
func (s *Server) putSystemObject(ctx context.Context, gr schema.GroupResource, obj runtime.Object,
	current func(runtime.Object) bool, set func(runtime.Object)) error {
	res := s.reg.lookupGroupResource(gr)
	m := obj.(metav1.Object)
	key := res.key(s.cfg.EtcdPrefix, m.GetNamespace(), m.GetName())
	_, err := s.store.GuaranteedUpdate(ctx, key, func(cur runtime.Object) (runtime.Object, error) {
		if current(cur) {
			return nil, errDryRun{}
		}
		set(cur)
		return cur, nil
	}, store.UpdateOptions{})
	var dr errDryRun
	switch {
	case errors.As(err, &dr):
		return nil
	case errors.Is(err, store.ErrNotFound):
		_, err = s.createStored(ctx, res, obj, createOptions{manager: serverFieldManager})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
	}
	return err
}
