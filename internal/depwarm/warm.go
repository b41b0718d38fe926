package depwarm

import (
	_ "github.com/gorilla/mux"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/prometheus/client_golang/prometheus/promhttp"
	_ "github.com/spf13/cobra"
	_ "github.com/spf13/viper"
	_ "go.etcd.io/etcd/client/v3"
	_ "go.etcd.io/etcd/server/v3/embed"
	_ "k8s.io/api/core/v1"
	_ "k8s.io/apimachinery/pkg/util/strategicpatch"
	_ "k8s.io/client-go/kubernetes"
	_ "k8s.io/client-go/informers"
	_ "k8s.io/client-go/tools/leaderelection"
	_ "k8s.io/client-go/tools/record"
	_ "k8s.io/component-helpers/scheduling/corev1"
)
