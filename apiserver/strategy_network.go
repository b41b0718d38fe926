package apiserver

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Services: defaulting and validation here; the cluster IP and node ports they are given
// come from the allocator (service_alloc.go), which the service strategy wraps.

// defaultService applies SetDefaults_Service.
func defaultService(svc *corev1.Service) {
	spec := &svc.Spec
	if spec.Type == "" {
		spec.Type = corev1.ServiceTypeClusterIP
	}
	if spec.SessionAffinity == "" {
		spec.SessionAffinity = corev1.ServiceAffinityNone
	}
	if spec.SessionAffinity == corev1.ServiceAffinityNone {
		spec.SessionAffinityConfig = nil
	}
	if spec.SessionAffinity == corev1.ServiceAffinityClientIP &&
		(spec.SessionAffinityConfig == nil || spec.SessionAffinityConfig.ClientIP == nil || spec.SessionAffinityConfig.ClientIP.TimeoutSeconds == nil) {
		timeout := corev1.DefaultClientIPServiceAffinitySeconds
		spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: &timeout}}
	}
	for i := range spec.Ports {
		p := &spec.Ports[i]
		if p.Protocol == "" {
			p.Protocol = corev1.ProtocolTCP
		}
		if p.TargetPort == intstr.FromInt32(0) || p.TargetPort == intstr.FromString("") {
			p.TargetPort = intstr.FromInt32(p.Port)
		}
	}
	switch spec.Type {
	case corev1.ServiceTypeNodePort, corev1.ServiceTypeLoadBalancer:
		if spec.ExternalTrafficPolicy == "" {
			spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster
		}
	}
	if spec.Type == corev1.ServiceTypeLoadBalancer && spec.AllocateLoadBalancerNodePorts == nil {
		t := true
		spec.AllocateLoadBalancerNodePorts = &t
	}
	if spec.Type != corev1.ServiceTypeExternalName && spec.InternalTrafficPolicy == nil {
		p := corev1.ServiceInternalTrafficPolicyCluster
		spec.InternalTrafficPolicy = &p
	}
	if spec.Type != corev1.ServiceTypeExternalName {
		if spec.IPFamilyPolicy == nil {
			p := corev1.IPFamilyPolicySingleStack
			spec.IPFamilyPolicy = &p
		}
		if len(spec.IPFamilies) == 0 {
			spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol}
		}
	}
	// clusterIP and clusterIPs say the same thing; either may be the one set.
	if spec.ClusterIP == "" && len(spec.ClusterIPs) > 0 {
		spec.ClusterIP = spec.ClusterIPs[0]
	}
	if spec.ClusterIP != "" && len(spec.ClusterIPs) == 0 {
		spec.ClusterIPs = []string{spec.ClusterIP}
	}
}

// dropTypeDependentFields clears, on an update that changes the type, what only the old
// type had and the client left as it was: node ports when a Service is no longer NodePort
// or LoadBalancer, the cluster IP when it becomes ExternalName (as kube-apiserver does).
func dropTypeDependentFields(svc, old *corev1.Service) {
	if svc.Spec.Type == old.Spec.Type {
		return
	}
	if !usesNodePorts(svc) {
		oldPorts := map[int32]bool{}
		for _, p := range old.Spec.Ports {
			oldPorts[p.NodePort] = true
		}
		for i := range svc.Spec.Ports {
			if oldPorts[svc.Spec.Ports[i].NodePort] {
				svc.Spec.Ports[i].NodePort = 0
			}
		}
	}
	if svc.Spec.Type == corev1.ServiceTypeExternalName {
		if svc.Spec.ClusterIP == old.Spec.ClusterIP {
			svc.Spec.ClusterIP, svc.Spec.ClusterIPs = "", nil
		}
		svc.Spec.IPFamilies, svc.Spec.IPFamilyPolicy, svc.Spec.InternalTrafficPolicy = nil, nil, nil
	}
	if svc.Spec.Type != corev1.ServiceTypeNodePort && svc.Spec.Type != corev1.ServiceTypeLoadBalancer &&
		svc.Spec.ExternalTrafficPolicy == old.Spec.ExternalTrafficPolicy {
		svc.Spec.ExternalTrafficPolicy = ""
	}
}

// keepAllocated carries the stored cluster IP and node ports into an update that left
// them out (kubectl replace, a PUT of an edited manifest), as kube-apiserver does.
func keepAllocated(svc, old *corev1.Service) {
	if svc.Spec.Type == corev1.ServiceTypeExternalName || old.Spec.Type == corev1.ServiceTypeExternalName {
		return
	}
	if svc.Spec.ClusterIP == "" && len(svc.Spec.ClusterIPs) == 0 {
		svc.Spec.ClusterIP, svc.Spec.ClusterIPs = old.Spec.ClusterIP, append([]string(nil), old.Spec.ClusterIPs...)
	}
	if !usesNodePorts(svc) || !usesNodePorts(old) {
		return
	}
	byPort := map[string]int32{}
	for _, p := range old.Spec.Ports {
		byPort[fmt.Sprintf("%s/%d", p.Protocol, p.Port)] = p.NodePort
	}
	for i := range svc.Spec.Ports {
		p := &svc.Spec.Ports[i]
		if p.NodePort == 0 {
			protocol := p.Protocol
			if protocol == "" {
				protocol = corev1.ProtocolTCP
			}
			p.NodePort = byPort[fmt.Sprintf("%s/%d", protocol, p.Port)]
		}
	}
}

// usesNodePorts reports whether svc's ports get node ports.
func usesNodePorts(svc *corev1.Service) bool {
	switch svc.Spec.Type {
	case corev1.ServiceTypeNodePort:
		return true
	case corev1.ServiceTypeLoadBalancer:
		return svc.Spec.AllocateLoadBalancerNodePorts == nil || *svc.Spec.AllocateLoadBalancerNodePorts
	}
	return false
}

// hasClusterIP reports whether svc is given a cluster IP (not headless, not ExternalName).
func hasClusterIP(svc *corev1.Service) bool {
	return svc.Spec.Type != corev1.ServiceTypeExternalName && svc.Spec.ClusterIP != corev1.ClusterIPNone
}

var supportedServiceTypes = []string{string(corev1.ServiceTypeClusterIP), string(corev1.ServiceTypeExternalName),
	string(corev1.ServiceTypeLoadBalancer), string(corev1.ServiceTypeNodePort)}

func validateService(svc *corev1.Service) field.ErrorList {
	spec := &svc.Spec
	sp := field.NewPath("spec")
	var errs field.ErrorList
	switch spec.Type {
	case corev1.ServiceTypeClusterIP, corev1.ServiceTypeNodePort, corev1.ServiceTypeLoadBalancer:
	case corev1.ServiceTypeExternalName:
		if spec.ExternalName == "" {
			errs = append(errs, field.Required(sp.Child("externalName"), ""))
		} else {
			for _, msg := range validation.IsDNS1123Subdomain(strings.TrimSuffix(spec.ExternalName, ".")) {
				errs = append(errs, field.Invalid(sp.Child("externalName"), spec.ExternalName, msg))
			}
		}
		if spec.ClusterIP != "" {
			errs = append(errs, field.Forbidden(sp.Child("clusterIP"), "may not be set for ExternalName services"))
		}
	default:
		errs = append(errs, field.NotSupported(sp.Child("type"), spec.Type, supportedServiceTypes))
	}
	headless := spec.ClusterIP == corev1.ClusterIPNone
	if len(spec.Ports) == 0 && !headless && spec.Type != corev1.ServiceTypeExternalName {
		errs = append(errs, field.Required(sp.Child("ports"), ""))
	}
	if headless && spec.Type != corev1.ServiceTypeClusterIP && spec.Type != corev1.ServiceTypeExternalName {
		errs = append(errs, field.Invalid(sp.Child("clusterIPs").Index(0), spec.ClusterIP, "may not be set to 'None' for "+string(spec.Type)+" services"))
	}
	if spec.ClusterIP != "" && !headless && net.ParseIP(spec.ClusterIP) == nil {
		errs = append(errs, field.Invalid(sp.Child("clusterIPs").Index(0), spec.ClusterIP, "must be empty, 'None', or a valid IP address"))
	}
	if len(spec.ClusterIPs) > 0 && spec.ClusterIP != spec.ClusterIPs[0] {
		errs = append(errs, field.Invalid(sp.Child("clusterIPs").Index(0), spec.ClusterIPs, "must be equal to the value of spec.clusterIP"))
	}
	names := sets.New[string]()
	seen := map[string]bool{}
	for i, port := range spec.Ports {
		pp := sp.Child("ports").Index(i)
		if len(spec.Ports) > 1 && port.Name == "" {
			errs = append(errs, field.Required(pp.Child("name"), ""))
		} else if port.Name != "" {
			for _, msg := range validation.IsDNS1123Label(port.Name) {
				errs = append(errs, field.Invalid(pp.Child("name"), port.Name, msg))
			}
			if names.Has(port.Name) {
				errs = append(errs, field.Duplicate(pp.Child("name"), port.Name))
			}
			names.Insert(port.Name)
		}
		for _, msg := range validation.IsValidPortNum(int(port.Port)) {
			errs = append(errs, field.Invalid(pp.Child("port"), port.Port, msg))
		}
		switch port.Protocol {
		case corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP:
		default:
			errs = append(errs, field.NotSupported(pp.Child("protocol"), port.Protocol, []string{"SCTP", "TCP", "UDP"}))
		}
		errs = append(errs, validatePortNumOrName(port.TargetPort, pp.Child("targetPort"))...)
		if port.NodePort != 0 && !usesNodePorts(svc) {
			errs = append(errs, field.Forbidden(pp.Child("nodePort"), fmt.Sprintf("may not be used when `type` is '%s'", spec.Type)))
		}
		if port.NodePort != 0 {
			for _, msg := range validation.IsValidPortNum(int(port.NodePort)) {
				errs = append(errs, field.Invalid(pp.Child("nodePort"), port.NodePort, msg))
			}
		}
		key := fmt.Sprintf("%s/%d", port.Protocol, port.Port)
		if seen[key] {
			errs = append(errs, field.Duplicate(pp, key))
		}
		seen[key] = true
	}
	switch spec.SessionAffinity {
	case corev1.ServiceAffinityNone, corev1.ServiceAffinityClientIP:
	default:
		errs = append(errs, field.NotSupported(sp.Child("sessionAffinity"), spec.SessionAffinity, []string{"ClientIP", "None"}))
	}
	if spec.ExternalTrafficPolicy != "" {
		switch {
		case spec.Type != corev1.ServiceTypeNodePort && spec.Type != corev1.ServiceTypeLoadBalancer:
			errs = append(errs, field.Invalid(sp.Child("externalTrafficPolicy"), spec.ExternalTrafficPolicy, "may only be set when `type` is 'NodePort' or 'LoadBalancer'"))
		case spec.ExternalTrafficPolicy != corev1.ServiceExternalTrafficPolicyCluster && spec.ExternalTrafficPolicy != corev1.ServiceExternalTrafficPolicyLocal:
			errs = append(errs, field.NotSupported(sp.Child("externalTrafficPolicy"), spec.ExternalTrafficPolicy, []string{"Cluster", "Local"}))
		}
	}
	errs = append(errs, metav1validation.ValidateLabels(spec.Selector, sp.Child("selector"))...)
	for i, ip := range spec.ExternalIPs {
		if net.ParseIP(ip) == nil {
			errs = append(errs, field.Invalid(sp.Child("externalIPs").Index(i), ip, "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)"))
		}
	}
	return errs
}

func validatePortNumOrName(v intstr.IntOrString, p *field.Path) field.ErrorList {
	var msgs []string
	if v.Type == intstr.Int {
		msgs = validation.IsValidPortNum(v.IntValue())
	} else {
		msgs = validation.IsValidPortName(v.StrVal)
	}
	var errs field.ErrorList
	for _, msg := range msgs {
		errs = append(errs, field.Invalid(p, v.String(), msg))
	}
	return errs
}

func validateServiceUpdate(svc, old *corev1.Service) field.ErrorList {
	var errs field.ErrorList
	if hasClusterIP(old) && old.Spec.ClusterIP != "" && svc.Spec.Type != corev1.ServiceTypeExternalName &&
		svc.Spec.ClusterIP != old.Spec.ClusterIP {
		errs = append(errs, field.Invalid(field.NewPath("spec", "clusterIPs").Index(0), svc.Spec.ClusterIPs, "may not change once set"))
	}
	if old.Spec.ClusterIP == corev1.ClusterIPNone && svc.Spec.ClusterIP != corev1.ClusterIPNone && svc.Spec.Type != corev1.ServiceTypeExternalName {
		errs = append(errs, field.Invalid(field.NewPath("spec", "clusterIPs").Index(0), svc.Spec.ClusterIPs, "may not change once set"))
	}
	return errs
}

func serviceColumns() []metav1.TableColumnDefinition {
	return []metav1.TableColumnDefinition{nameColumn(),
		{Name: "Type", Type: "string", Description: "type determines how the Service is exposed."},
		{Name: "Cluster-IP", Type: "string", Description: "clusterIP is the IP address of the service."},
		{Name: "External-IP", Type: "string", Description: "externalIPs is a list of IP addresses for which nodes in the cluster will also accept traffic for this service."},
		{Name: "Port(s)", Type: "string", Description: "The list of ports that are exposed by this service."},
		ageColumn(),
		{Name: "Selector", Type: "string", Priority: 1, Description: "Route service traffic to pods with label keys and values matching this selector."},
	}
}

func serviceRow(svc *corev1.Service, now time.Time) []any {
	clusterIP := svc.Spec.ClusterIP
	if clusterIP == "" {
		clusterIP = "<none>"
	}
	external := "<none>"
	switch {
	case svc.Spec.Type == corev1.ServiceTypeExternalName:
		external = svc.Spec.ExternalName
	case len(svc.Spec.ExternalIPs) > 0:
		external = strings.Join(svc.Spec.ExternalIPs, ",")
	case svc.Spec.Type == corev1.ServiceTypeLoadBalancer:
		external = "<pending>"
		var ips []string
		for _, in := range svc.Status.LoadBalancer.Ingress {
			ips = append(ips, in.IP+in.Hostname)
		}
		if len(ips) > 0 {
			external = strings.Join(ips, ",")
		}
	}
	var ports []string
	for _, p := range svc.Spec.Ports {
		s := fmt.Sprintf("%d/%s", p.Port, p.Protocol)
		if p.NodePort != 0 {
			s = fmt.Sprintf("%d:%d/%s", p.Port, p.NodePort, p.Protocol)
		}
		ports = append(ports, s)
	}
	portText := strings.Join(ports, ",")
	if portText == "" {
		portText = "<none>"
	}
	selector := "<none>"
	if len(svc.Spec.Selector) > 0 {
		selector = labels.FormatLabels(svc.Spec.Selector)
	}
	return []any{svc.Name, string(svc.Spec.Type), clusterIP, external, portText, age(svc.CreationTimestamp, now), selector}
}

// serviceFields are the selectable fields of services, as kube-apiserver offers them.
var serviceFields = fieldsOf(map[string]func(*corev1.Service) string{
	"spec.clusterIP": func(s *corev1.Service) string { return s.Spec.ClusterIP },
	"spec.type":      func(s *corev1.Service) string { return string(s.Spec.Type) },
})

var endpointsRules = kindRules[*corev1.Endpoints]{
	defaults: func(ep *corev1.Endpoints) {
		for i := range ep.Subsets {
			for j := range ep.Subsets[i].Ports {
				if ep.Subsets[i].Ports[j].Protocol == "" {
					ep.Subsets[i].Ports[j].Protocol = corev1.ProtocolTCP
				}
			}
		}
	},
	check: func(ep *corev1.Endpoints) field.ErrorList {
		var errs field.ErrorList
		for i, ss := range ep.Subsets {
			sp := field.NewPath("subsets").Index(i)
			for _, list := range []struct {
				name  string
				addrs []corev1.EndpointAddress
			}{{"addresses", ss.Addresses}, {"notReadyAddresses", ss.NotReadyAddresses}} {
				for j, a := range list.addrs {
					if net.ParseIP(a.IP) == nil {
						errs = append(errs, field.Invalid(sp.Child(list.name).Index(j).Child("ip"), a.IP, "must be a valid IP address"))
					}
				}
			}
			for j, port := range ss.Ports {
				pp := sp.Child("ports").Index(j)
				if len(ss.Ports) > 1 && port.Name == "" {
					errs = append(errs, field.Required(pp.Child("name"), ""))
				}
				for _, msg := range validation.IsValidPortNum(int(port.Port)) {
					errs = append(errs, field.Invalid(pp.Child("port"), port.Port, msg))
				}
			}
		}
		return errs
	},
	columns: []metav1.TableColumnDefinition{nameColumn(),
		{Name: "Endpoints", Type: "string", Description: "The set of all endpoints is the union of all subsets."}, ageColumn()},
	row: func(ep *corev1.Endpoints, now time.Time) []any {
		var all []string
		for _, ss := range ep.Subsets {
			for _, a := range ss.Addresses {
				if len(ss.Ports) == 0 {
					all = append(all, a.IP)
				}
				for _, p := range ss.Ports {
					all = append(all, net.JoinHostPort(a.IP, strconv.Itoa(int(p.Port))))
				}
			}
		}
		return []any{ep.Name, listWithMore(all, 3), age(ep.CreationTimestamp, now)}
	},
}

// listWithMore prints the first n entries and how many more there are, as kubectl does.
func listWithMore(all []string, n int) string {
	switch {
	case len(all) == 0:
		return "<none>"
	case len(all) <= n:
		return strings.Join(all, ",")
	}
	return fmt.Sprintf("%s + %d more...", strings.Join(all[:n], ","), len(all)-n)
}

var endpointSliceRules = kindRules[*discoveryv1.EndpointSlice]{
	defaults: func(es *discoveryv1.EndpointSlice) {
		for i := range es.Ports {
			p := &es.Ports[i]
			if p.Protocol == nil {
				tcp := corev1.ProtocolTCP
				p.Protocol = &tcp
			}
			if p.Name == nil {
				empty := ""
				p.Name = &empty
			}
		}
	},
	check: func(es *discoveryv1.EndpointSlice) field.ErrorList {
		var errs field.ErrorList
		switch es.AddressType {
		case discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6, discoveryv1.AddressTypeFQDN:
		case "":
			errs = append(errs, field.Required(field.NewPath("addressType"), ""))
		default:
			errs = append(errs, field.NotSupported(field.NewPath("addressType"), es.AddressType, []string{"FQDN", "IPv4", "IPv6"}))
		}
		for i, ep := range es.Endpoints {
			ap := field.NewPath("endpoints").Index(i).Child("addresses")
			if len(ep.Addresses) == 0 {
				errs = append(errs, field.Required(ap, "must contain at least 1 address"))
			}
			for j, a := range ep.Addresses {
				ip := net.ParseIP(a)
				switch {
				case es.AddressType == discoveryv1.AddressTypeIPv4 && (ip == nil || ip.To4() == nil):
					errs = append(errs, field.Invalid(ap.Index(j), a, "must be a valid IPv4 address"))
				case es.AddressType == discoveryv1.AddressTypeIPv6 && (ip == nil || ip.To4() != nil):
					errs = append(errs, field.Invalid(ap.Index(j), a, "must be a valid IPv6 address"))
				}
			}
		}
		for i, p := range es.Ports {
			if p.Port != nil {
				for _, msg := range validation.IsValidPortNum(int(*p.Port)) {
					errs = append(errs, field.Invalid(field.NewPath("ports").Index(i).Child("port"), *p.Port, msg))
				}
			}
		}
		return errs
	},
	checkUpdate: func(es, old *discoveryv1.EndpointSlice) field.ErrorList {
		return immutable(es.AddressType != old.AddressType, es.AddressType, field.NewPath("addressType"))
	},
	columns: []metav1.TableColumnDefinition{nameColumn(),
		{Name: "AddressType", Type: "string", Description: "addressType specifies the type of address carried by this EndpointSlice."},
		{Name: "Ports", Type: "string", Description: "ports specifies the list of network ports exposed by each endpoint in this slice."},
		{Name: "Endpoints", Type: "string", Description: "endpoints is a list of unique endpoints in this slice."},
		ageColumn()},
	row: func(es *discoveryv1.EndpointSlice, now time.Time) []any {
		var ports, addrs []string
		for _, p := range es.Ports {
			if p.Port != nil {
				ports = append(ports, strconv.Itoa(int(*p.Port)))
			}
		}
		for _, ep := range es.Endpoints {
			addrs = append(addrs, ep.Addresses...)
		}
		portText := strings.Join(ports, ",")
		if len(es.Ports) > 0 && len(ports) == 0 {
			portText = "<unset>"
		}
		if portText == "" {
			portText = "<none>"
		}
		return []any{es.Name, string(es.AddressType), portText, listWithMore(addrs, 3), age(es.CreationTimestamp, now)}
	},
}

var networkPolicyRules = kindRules[*networkingv1.NetworkPolicy]{
	defaults: func(np *networkingv1.NetworkPolicy) {
		for i := range np.Spec.Ingress {
			defaultPolicyPorts(np.Spec.Ingress[i].Ports)
		}
		for i := range np.Spec.Egress {
			defaultPolicyPorts(np.Spec.Egress[i].Ports)
		}
		if len(np.Spec.PolicyTypes) == 0 {
			np.Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
			if len(np.Spec.Egress) > 0 {
				np.Spec.PolicyTypes = append(np.Spec.PolicyTypes, networkingv1.PolicyTypeEgress)
			}
		}
	},
	check: func(np *networkingv1.NetworkPolicy) field.ErrorList {
		sp := field.NewPath("spec")
		errs := metav1validation.ValidateLabelSelector(&np.Spec.PodSelector, metav1validation.LabelSelectorValidationOptions{}, sp.Child("podSelector"))
		for i, t := range np.Spec.PolicyTypes {
			if t != networkingv1.PolicyTypeIngress && t != networkingv1.PolicyTypeEgress {
				errs = append(errs, field.NotSupported(sp.Child("policyTypes").Index(i), t, []string{"Egress", "Ingress"}))
			}
		}
		for i, rule := range np.Spec.Ingress {
			errs = append(errs, validatePolicyPeers(rule.From, rule.Ports, sp.Child("ingress").Index(i), "from")...)
		}
		for i, rule := range np.Spec.Egress {
			errs = append(errs, validatePolicyPeers(rule.To, rule.Ports, sp.Child("egress").Index(i), "to")...)
		}
		return errs
	},
	columns: []metav1.TableColumnDefinition{nameColumn(),
		{Name: "Pod-Selector", Type: "string", Description: "podSelector selects the pods to which this NetworkPolicy object applies."},
		ageColumn()},
	row: func(np *networkingv1.NetworkPolicy, now time.Time) []any {
		return []any{np.Name, metav1.FormatLabelSelector(&np.Spec.PodSelector), age(np.CreationTimestamp, now)}
	},
}

func defaultPolicyPorts(ports []networkingv1.NetworkPolicyPort) {
	for i := range ports {
		if ports[i].Protocol == nil {
			tcp := corev1.ProtocolTCP
			ports[i].Protocol = &tcp
		}
	}
}

func validatePolicyPeers(peers []networkingv1.NetworkPolicyPeer, ports []networkingv1.NetworkPolicyPort, p *field.Path, peerField string) field.ErrorList {
	var errs field.ErrorList
	for i, port := range ports {
		pp := p.Child("ports").Index(i)
		if port.Protocol != nil {
			switch *port.Protocol {
			case corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP:
			default:
				errs = append(errs, field.NotSupported(pp.Child("protocol"), *port.Protocol, []string{"SCTP", "TCP", "UDP"}))
			}
		}
		if port.Port != nil {
			errs = append(errs, validatePortNumOrName(*port.Port, pp.Child("port"))...)
		}
	}
	for i, peer := range peers {
		pp := p.Child(peerField).Index(i)
		set := 0
		if peer.PodSelector != nil {
			set++
			errs = append(errs, metav1validation.ValidateLabelSelector(peer.PodSelector, metav1validation.LabelSelectorValidationOptions{}, pp.Child("podSelector"))...)
		}
		if peer.NamespaceSelector != nil {
			set++
			errs = append(errs, metav1validation.ValidateLabelSelector(peer.NamespaceSelector, metav1validation.LabelSelectorValidationOptions{}, pp.Child("namespaceSelector"))...)
		}
		if peer.IPBlock != nil {
			if set > 0 {
				errs = append(errs, field.Forbidden(pp, "may not specify both ipBlock and another peer"))
			}
			set++
			if _, _, err := net.ParseCIDR(peer.IPBlock.CIDR); err != nil {
				errs = append(errs, field.Invalid(pp.Child("ipBlock", "cidr"), peer.IPBlock.CIDR, "must be a valid CIDR"))
			}
		}
		if set == 0 {
			errs = append(errs, field.Required(pp, "must specify a peer"))
		}
	}
	return errs
}

// serviceStrategy adds to the Service rules the cluster IP and node ports each Service
// is given (see poolUser).
type serviceStrategy struct {
	kindRules[*corev1.Service]
	alloc *serviceAllocator
}

var _ poolUser = serviceStrategy{}

func newServiceStrategy(alloc *serviceAllocator) serviceStrategy {
	return serviceStrategy{alloc: alloc, kindRules: kindRules[*corev1.Service]{
		hasStatus: true,
		defaults:  defaultService,
		onUpdate: func(svc, old *corev1.Service, _ time.Time) {
			keepAllocated(svc, old)
			dropTypeDependentFields(svc, old)
			defaultService(svc)
		},
		check:       validateService,
		checkUpdate: validateServiceUpdate,
		columns:     serviceColumns(),
		row:         serviceRow,
	}}
}

func (s serviceStrategy) allocate(ctx context.Context, obj, old runtime.Object, dryRun bool) (func(), error) {
	var oldSvc *corev1.Service
	if old != nil {
		oldSvc = old.(*corev1.Service)
	}
	return s.alloc.allocate(ctx, obj.(*corev1.Service), oldSvc, dryRun)
}

func (s serviceStrategy) release(ctx context.Context, obj, old runtime.Object) {
	var svc *corev1.Service
	if obj != nil {
		svc = obj.(*corev1.Service)
	}
	s.alloc.release(ctx, svc, old.(*corev1.Service))
}

// Ingresses and IngressClasses are stored and served with kube-apiserver's validation; what
// acts on them is an ingress controller, which no cluster has built in.

var ingressPathTypes = []string{string(networkingv1.PathTypeExact), string(networkingv1.PathTypeImplementationSpecific), string(networkingv1.PathTypePrefix)}

var ingressRules = kindRules[*networkingv1.Ingress]{
	hasStatus: true,
	check: func(ing *networkingv1.Ingress) field.ErrorList {
		p := field.NewPath("spec")
		spec := &ing.Spec
		var errs field.ErrorList
		if len(spec.Rules) == 0 && spec.DefaultBackend == nil {
			errs = append(errs, field.Invalid(p, spec.Rules, "either `defaultBackend` or `rules` must be specified"))
		}
		if spec.DefaultBackend != nil {
			errs = append(errs, validateIngressBackend(spec.DefaultBackend, p.Child("defaultBackend"))...)
		}
		for i, rule := range spec.Rules {
			rp := p.Child("rules").Index(i)
			if rule.Host != "" {
				errs = append(errs, validateIngressHost(rule.Host, rp.Child("host"))...)
			}
			if rule.HTTP == nil {
				continue
			}
			hp := rp.Child("http", "paths")
			if len(rule.HTTP.Paths) == 0 {
				errs = append(errs, field.Required(hp, ""))
			}
			for j, path := range rule.HTTP.Paths {
				errs = append(errs, validateIngressPath(&path, hp.Index(j))...)
			}
		}
		for i, tls := range spec.TLS {
			tp := p.Child("tls").Index(i)
			for j, host := range tls.Hosts {
				errs = append(errs, validateIngressHost(host, tp.Child("hosts").Index(j))...)
			}
			if tls.SecretName != "" {
				for _, msg := range apivalidation.NameIsDNSSubdomain(tls.SecretName, false) {
					errs = append(errs, field.Invalid(tp.Child("secretName"), tls.SecretName, msg))
				}
			}
		}
		if spec.IngressClassName != nil {
			for _, msg := range apivalidation.NameIsDNSSubdomain(*spec.IngressClassName, false) {
				errs = append(errs, field.Invalid(p.Child("ingressClassName"), *spec.IngressClassName, msg))
			}
		}
		return errs
	},
	columns: []metav1.TableColumnDefinition{nameColumn(),
		{Name: "Class", Type: "string", Description: "The name of the IngressClass resource that should be used for ingress."},
		{Name: "Hosts", Type: "string", Description: "Hosts that incoming requests are matched against before the ingress rule"},
		{Name: "Address", Type: "string", Description: "Address is a list containing ingress points for the load-balancer"},
		{Name: "Ports", Type: "string", Description: "Ports of TLS configurations that open"},
		ageColumn(),
	},
	row: func(ing *networkingv1.Ingress, now time.Time) []any {
		class := "<none>"
		if ing.Spec.IngressClassName != nil {
			class = *ing.Spec.IngressClassName
		}
		var hosts []string
		for _, r := range ing.Spec.Rules {
			if r.Host != "" {
				hosts = append(hosts, r.Host)
			}
		}
		hostText := "*"
		if len(hosts) > 0 {
			hostText = listWithMore(hosts, 3)
		}
		var addrs []string
		for _, lb := range ing.Status.LoadBalancer.Ingress {
			if lb.IP != "" {
				addrs = append(addrs, lb.IP)
			} else if lb.Hostname != "" {
				addrs = append(addrs, lb.Hostname)
			}
		}
		ports := "80"
		if len(ing.Spec.TLS) > 0 {
			ports = "80, 443"
		}
		return []any{ing.Name, class, hostText, strings.Join(addrs, ","), ports, age(ing.CreationTimestamp, now)}
	},
}

// validateIngressHost accepts a DNS name, or one with a leading "*." wildcard; not an IP.
func validateIngressHost(host string, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if net.ParseIP(host) != nil {
		errs = append(errs, field.Invalid(p, host, "must be a DNS name, not an IP address"))
	}
	msgs := validation.IsDNS1123Subdomain(host)
	if strings.Contains(host, "*") {
		msgs = validation.IsWildcardDNS1123Subdomain(host)
	}
	for _, msg := range msgs {
		errs = append(errs, field.Invalid(p, host, msg))
	}
	return errs
}

func validateIngressPath(path *networkingv1.HTTPIngressPath, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch {
	case path.PathType == nil:
		errs = append(errs, field.Required(p.Child("pathType"), "pathType must be specified"))
	case *path.PathType == networkingv1.PathTypeExact || *path.PathType == networkingv1.PathTypePrefix:
		if !strings.HasPrefix(path.Path, "/") {
			errs = append(errs, field.Invalid(p.Child("path"), path.Path, "must be an absolute path"))
		}
		for _, bad := range []string{"//", "/./", "/../", "%2f", "%2F"} {
			if strings.Contains(path.Path, bad) {
				errs = append(errs, field.Invalid(p.Child("path"), path.Path, fmt.Sprintf("must not contain '%s'", bad)))
			}
		}
		for _, bad := range []string{"/..", "/."} {
			if strings.HasSuffix(path.Path, bad) {
				errs = append(errs, field.Invalid(p.Child("path"), path.Path, fmt.Sprintf("cannot end with '%s'", bad)))
			}
		}
	case *path.PathType == networkingv1.PathTypeImplementationSpecific:
		if path.Path != "" && !strings.HasPrefix(path.Path, "/") {
			errs = append(errs, field.Invalid(p.Child("path"), path.Path, "must be an absolute path"))
		}
	default:
		errs = append(errs, field.NotSupported(p.Child("pathType"), *path.PathType, ingressPathTypes))
	}
	return append(errs, validateIngressBackend(&path.Backend, p.Child("backend"))...)
}

func validateIngressBackend(b *networkingv1.IngressBackend, p *field.Path) field.ErrorList {
	switch {
	case b.Service != nil && b.Resource != nil:
		return field.ErrorList{field.Invalid(p, "", "cannot set both resource and service backends")}
	case b.Resource != nil:
		var errs field.ErrorList
		if b.Resource.Kind == "" {
			errs = append(errs, field.Required(p.Child("resource", "kind"), ""))
		}
		if b.Resource.Name == "" {
			errs = append(errs, field.Required(p.Child("resource", "name"), ""))
		}
		return errs
	case b.Service == nil:
		return field.ErrorList{field.Invalid(p, "", "one backend type must be specified")}
	}
	sp := p.Child("service")
	var errs field.ErrorList
	if b.Service.Name == "" {
		errs = append(errs, field.Required(sp.Child("name"), ""))
	} else {
		for _, msg := range apivalidation.NameIsDNS1035Label(b.Service.Name, false) {
			errs = append(errs, field.Invalid(sp.Child("name"), b.Service.Name, msg))
		}
	}
	port := b.Service.Port
	pp := sp.Child("port")
	switch {
	case port.Name != "" && port.Number != 0:
		errs = append(errs, field.Invalid(pp, port, "cannot set both port name & port number"))
	case port.Name != "":
		for _, msg := range validation.IsValidPortName(port.Name) {
			errs = append(errs, field.Invalid(pp.Child("name"), port.Name, msg))
		}
	case port.Number != 0:
		for _, msg := range validation.IsValidPortNum(int(port.Number)) {
			errs = append(errs, field.Invalid(pp.Child("number"), port.Number, msg))
		}
	default:
		errs = append(errs, field.Required(pp, "port name or number is required"))
	}
	return errs
}

var ingressClassRules = kindRules[*networkingv1.IngressClass]{
	defaults: func(ic *networkingv1.IngressClass) {
		if prm := ic.Spec.Parameters; prm != nil && prm.Scope == nil {
			scope := networkingv1.IngressClassParametersReferenceScopeCluster
			prm.Scope = &scope
		}
	},
	check: func(ic *networkingv1.IngressClass) field.ErrorList {
		p := field.NewPath("spec")
		var errs field.ErrorList
		switch c := ic.Spec.Controller; {
		case c == "":
			errs = append(errs, field.Required(p.Child("controller"), ""))
		case len(c) > 250:
			errs = append(errs, field.TooLong(p.Child("controller"), "", 250))
		default:
			errs = append(errs, validation.IsDomainPrefixedPath(p.Child("controller"), c)...)
		}
		prm := ic.Spec.Parameters
		if prm == nil {
			return errs
		}
		pp := p.Child("parameters")
		if prm.Kind == "" {
			errs = append(errs, field.Required(pp.Child("kind"), ""))
		}
		if prm.Name == "" {
			errs = append(errs, field.Required(pp.Child("name"), ""))
		}
		scopes := []string{networkingv1.IngressClassParametersReferenceScopeCluster, networkingv1.IngressClassParametersReferenceScopeNamespace}
		switch {
		case prm.Scope == nil:
			errs = append(errs, field.Required(pp.Child("scope"), ""))
		case *prm.Scope == networkingv1.IngressClassParametersReferenceScopeNamespace && prm.Namespace == nil:
			errs = append(errs, field.Required(pp.Child("namespace"), "`parameters.scope` is set to 'Namespace'"))
		case *prm.Scope == networkingv1.IngressClassParametersReferenceScopeCluster && prm.Namespace != nil:
			errs = append(errs, field.Forbidden(pp.Child("namespace"), "`parameters.scope` is set to 'Cluster'"))
		case *prm.Scope != networkingv1.IngressClassParametersReferenceScopeCluster && *prm.Scope != networkingv1.IngressClassParametersReferenceScopeNamespace:
			errs = append(errs, field.NotSupported(pp.Child("scope"), *prm.Scope, scopes))
		}
		return errs
	},
	checkUpdate: func(ic, old *networkingv1.IngressClass) field.ErrorList {
		return immutable(ic.Spec.Controller != old.Spec.Controller, ic.Spec.Controller, field.NewPath("spec", "controller"))
	},
	columns: []metav1.TableColumnDefinition{nameColumn(),
		{Name: "Controller", Type: "string", Description: "Controller that is responsible for handling this class."},
		{Name: "Parameters", Type: "string", Description: "A reference to a resource with additional parameters."},
		ageColumn(),
	},
	row: func(ic *networkingv1.IngressClass, now time.Time) []any {
		params := "<none>"
		if prm := ic.Spec.Parameters; prm != nil {
			params = prm.Kind
			if prm.APIGroup != nil {
				params += "." + *prm.APIGroup
			}
			params += "/" + prm.Name
		}
		return []any{ic.Name, ic.Spec.Controller, params, age(ic.CreationTimestamp, now)}
	},
}
