package drapublish

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"tmc.dev/scheduler-plugin/pkg/apis/tmc/v1alpha1"
)

// templateWatch is the templates' reconciler: informers on the published recommendations, on
// the tenant namespaces (listed with the selector: no other namespace reaches it) and on the
// publisher's own templates (listed with its label: no other template reaches it). Any of their
// events adds the templates' key to the publisher's queue.
type templateWatch struct {
	recommendations cache.GenericLister
	namespaces      cache.Indexer
	templates       cache.Indexer
	synced          []cache.InformerSynced
	start           func(<-chan struct{})
}

func newTemplateWatch(client kubernetes.Interface, dyn dynamic.Interface, cfg Config, enqueue func()) *templateWatch {
	recFactory := dynamicinformer.NewDynamicSharedInformerFactory(dyn, cfg.Resync)
	recs := recFactory.ForResource(v1alpha1.Resource)
	nsFactory := informers.NewSharedInformerFactoryWithOptions(client, cfg.Resync,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector = cfg.TemplateNamespaces.String()
		}))
	namespaces := nsFactory.Core().V1().Namespaces().Informer()
	tplFactory := informers.NewSharedInformerFactoryWithOptions(client, cfg.Resync,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector = labels.SelectorFromSet(labels.Set{ManagedByLabel: ManagedBy}).String()
		}))
	templates := tplFactory.Resource().V1().ResourceClaimTemplates().Informer()
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { enqueue() },
		UpdateFunc: func(any, any) { enqueue() },
		DeleteFunc: func(any) { enqueue() },
	}
	for _, i := range []cache.SharedIndexInformer{recs.Informer(), namespaces, templates} {
		_, _ = i.AddEventHandler(handler)
	}
	return &templateWatch{
		recommendations: recs.Lister(),
		namespaces:      namespaces.GetIndexer(),
		templates:       templates.GetIndexer(),
		synced:          []cache.InformerSynced{recs.Informer().HasSynced, namespaces.HasSynced, templates.HasSynced},
		start: func(stop <-chan struct{}) {
			recFactory.Start(stop)
			nsFactory.Start(stop)
			tplFactory.Start(stop)
		},
	}
}

// reconcile makes one pass: the desired templates from the cached recommendations and tenant
// namespaces, the changes from the cached templates of the publisher's own.
func (w *templateWatch) reconcile(ctx context.Context, client kubernetes.Interface, timeout time.Duration) error {
	for _, synced := range w.synced {
		if !synced() {
			// A partial list of recommendations would delete the templates of those not yet
			// listed: the pass waits for the caches (Run adds the key once they are).
			return nil
		}
	}
	objs, err := w.recommendations.List(labels.Everything())
	if err != nil {
		return err
	}
	recs := make([]*unstructured.Unstructured, 0, len(objs))
	for _, o := range objs {
		if u, ok := o.(*unstructured.Unstructured); ok {
			recs = append(recs, u)
		}
	}
	var namespaces []*corev1.Namespace
	for _, o := range w.namespaces.List() {
		if ns, ok := o.(*corev1.Namespace); ok {
			namespaces = append(namespaces, ns)
		}
	}
	desired, unclaimed := DesiredTemplates(recs, namespaces)
	for _, u := range unclaimed {
		if errors.Is(u.Reason, ErrFallback) {
			klog.V(2).InfoS("recommendation gets no ResourceClaimTemplate", "recommendation", u.Recommendation, "reason", u.Reason.Error())
			continue
		}
		klog.InfoS("recommendation gets no ResourceClaimTemplate: its spec cannot be claimed", "recommendation", u.Recommendation, "reason", u.Reason.Error())
	}
	var stored []resourceapi.ResourceClaimTemplate
	for _, o := range w.templates.List() {
		if t, ok := o.(*resourceapi.ResourceClaimTemplate); ok {
			stored = append(stored, *t)
		}
	}
	return ApplyTemplates(ctx, client, DiffTemplates(stored, desired), timeout)
}

// ApplyTemplates makes the changes, each call bounded by timeout: creates, updates, replacements
// (delete by UID, then create), deletes. A create refused because a template of that name
// exists is not the publisher's to change (its own would be in the cache): it is logged and
// not retried; the next pass tries again. Every other failure is joined into the error.
func ApplyTemplates(ctx context.Context, client kubernetes.Interface, c TemplateChanges, timeout time.Duration) error {
	var errs []error
	taken := 0
	call := func(what string, ns, name string, f func(context.Context, resourceClaimTemplates) error) error {
		cctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		err := f(cctx, client.ResourceV1().ResourceClaimTemplates(ns))
		switch {
		case err == nil:
			klog.V(2).InfoS("template written", "verb", what, "namespace", ns, "template", name)
		case what == "create" && apierrors.IsAlreadyExists(err):
			taken++
			klog.InfoS("a ResourceClaimTemplate of this name exists that is not tmc-dra-publisher's (none of its own is cached there); left alone",
				"namespace", ns, "template", name)
		default:
			errs = append(errs, fmt.Errorf("%s %s/%s: %w", what, ns, name, err))
		}
		return err
	}
	create := func(t *resourceapi.ResourceClaimTemplate) error {
		return call("create", t.Namespace, t.Name, func(ctx context.Context, api resourceClaimTemplates) error {
			_, err := api.Create(ctx, t, metav1.CreateOptions{FieldManager: ManagedBy})
			return err
		})
	}
	remove := func(what string, g GoneTemplate) error {
		return call(what, g.Namespace, g.Name, func(ctx context.Context, api resourceClaimTemplates) error {
			// The UID as a precondition: only the template the diff saw, never another made since.
			err := api.Delete(ctx, g.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &g.UID}})
			if apierrors.IsNotFound(err) {
				return nil
			}
			return err
		})
	}
	for i := range c.Create {
		_ = create(&c.Create[i])
	}
	for i := range c.Update {
		t := &c.Update[i]
		_ = call("update", t.Namespace, t.Name, func(ctx context.Context, api resourceClaimTemplates) error {
			_, err := api.Update(ctx, t, metav1.UpdateOptions{FieldManager: ManagedBy})
			return err
		})
	}
	for i := range c.Replace {
		r := &c.Replace[i]
		if remove("delete", r.Old) == nil {
			_ = create(&r.New)
		}
	}
	for _, g := range c.Delete {
		_ = remove("delete", g)
	}
	klog.InfoS("templates reconciled", "created", len(c.Create), "updated", len(c.Update),
		"replaced", len(c.Replace), "deleted", len(c.Delete), "nameTaken", taken, "failed", len(errs))
	return errors.Join(errs...)
}

type resourceClaimTemplates interface {
	Create(context.Context, *resourceapi.ResourceClaimTemplate, metav1.CreateOptions) (*resourceapi.ResourceClaimTemplate, error)
	Update(context.Context, *resourceapi.ResourceClaimTemplate, metav1.UpdateOptions) (*resourceapi.ResourceClaimTemplate, error)
	Delete(context.Context, string, metav1.DeleteOptions) error
}
