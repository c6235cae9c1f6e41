package tmcnri

import (
	"errors"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// InformedNamespaces are the cluster's namespaces as an informer holds them: the plugin asks
// them at each placed container, which must not wait on the API server.
type InformedNamespaces struct {
	informer cache.SharedIndexInformer
}

// WatchNamespaces starts an informer of the cluster's namespaces (list and watch), stopped
// with stop.
func WatchNamespaces(client kubernetes.Interface, stop <-chan struct{}) (*InformedNamespaces, error) {
	factory := informers.NewSharedInformerFactory(client, 0)
	informer := factory.Core().V1().Namespaces().Informer()
	if informer == nil {
		return nil, errors.New("no namespace informer")
	}
	factory.Start(stop)
	return &InformedNamespaces{informer: informer}, nil
}

// Labels implements Namespaces.
func (n *InformedNamespaces) Labels(namespace string) (map[string]string, bool) {
	obj, ok, err := n.informer.GetStore().GetByKey(namespace)
	if err != nil || !ok {
		return nil, false
	}
	ns, ok := obj.(*corev1.Namespace)
	if !ok {
		return nil, false
	}
	return ns.Labels, true
}

// Synced implements Namespaces.
func (n *InformedNamespaces) Synced() bool { return n.informer.HasSynced() }
