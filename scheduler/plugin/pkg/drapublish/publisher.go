package drapublish

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"tmc.dev/scheduler-plugin/pkg/dra"
)

// Config is what a Publisher needs besides its client.
type Config struct {
	// Pools is the operator's rack pool sizes in bytes (the chart's rackPools), validated.
	Pools map[string]int64
	// Options are dra's options; their Generation is ignored (Diff sets each pool's).
	Options dra.Options
	// Debounce is how long a change waits for more before the cluster is reconciled.
	Debounce time.Duration
	// CallTimeout bounds every API call.
	CallTimeout time.Duration
	// Resync is how often the informers hand every object back, so that drift is repaired.
	Resync time.Duration
	// TemplateNamespaces selects the namespaces (by their labels: the chart's
	// admission.tenantNamespaceLabels) in which a ResourceClaimTemplate is kept per published
	// recommendation. Nil: no templates are kept, and neither recommendations, namespaces nor
	// templates are watched.
	TemplateNamespaces labels.Selector
}

// Publisher reconciles the driver tmc.dev's slices with the nodes: a single key in a
// rate-limited queue, added (after Debounce) whenever a node's labels, annotations or memory
// change or a tmc.dev slice changes, so that a burst of events makes one pass, and a failed pass
// is retried with a growing delay. With Config.TemplateNamespaces, a second key of the same
// queue keeps the ResourceClaimTemplates (templatewatch.go), passed and retried on its own.
type Publisher struct {
	client kubernetes.Interface
	cfg    Config
	nodes  corelisters.NodeLister
	slices resourcelisters.ResourceSliceLister
	synced []cache.InformerSynced
	queue  workqueue.TypedRateLimitingInterface[string]
	start  func(<-chan struct{})
	// templates is the second reconciler, nil when cfg.TemplateNamespaces is.
	templates *templateWatch
}

// The queue's keys: one pass of each reconciler at a time, each retried on its own.
const (
	key         = "cluster"
	templateKey = "templates"
)

// New makes a Publisher with its node informer and its informer of tmc.dev's slices (listed
// and watched with a field selector on spec.driver: other drivers' slices never reach it), and,
// with cfg.TemplateNamespaces, the informers the templates are kept from (dyn reads the
// recommendations; it may be nil without templates).
func New(client kubernetes.Interface, dyn dynamic.Interface, cfg Config) *Publisher {
	p := &Publisher{
		client: client,
		cfg:    cfg,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedMaxOfRateLimiter(
				workqueue.NewTypedItemExponentialFailureRateLimiter[string](time.Second, 5*time.Minute),
			),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "tmc-dra-publisher"},
		),
	}
	nodeFactory := informers.NewSharedInformerFactory(client, cfg.Resync)
	sliceFactory := informers.NewSharedInformerFactoryWithOptions(client, cfg.Resync,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector(resourceapi.ResourceSliceSelectorDriver, dra.DriverName).String()
		}))
	nodes := nodeFactory.Core().V1().Nodes()
	slices := sliceFactory.Resource().V1().ResourceSlices()
	p.nodes, p.slices = nodes.Lister(), slices.Lister()
	p.synced = []cache.InformerSynced{nodes.Informer().HasSynced, slices.Informer().HasSynced}
	enqueue := func() { p.queue.AddAfter(key, cfg.Debounce) }
	_, _ = nodes.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { enqueue() },
		UpdateFunc: func(old, cur any) {
			a, okA := old.(*corev1.Node)
			b, okB := cur.(*corev1.Node)
			if !okA || !okB || nodeMatters(a, b) || a.ResourceVersion == b.ResourceVersion {
				enqueue()
			}
		},
		DeleteFunc: func(any) { enqueue() },
	})
	_, _ = slices.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { enqueue() },
		UpdateFunc: func(any, any) { enqueue() },
		DeleteFunc: func(any) { enqueue() },
	})
	p.start = func(stop <-chan struct{}) {
		nodeFactory.Start(stop)
		sliceFactory.Start(stop)
	}
	if cfg.TemplateNamespaces != nil {
		p.templates = newTemplateWatch(client, dyn, cfg, func() { p.queue.AddAfter(templateKey, cfg.Debounce) })
	}
	return p
}

// nodeMatters says a node changed in what its slices are made of: its name's UID, labels,
// annotations or the memory its kubelet reports (the capacity is held to it). Heartbeats and
// condition changes alone make no pass. A resync (same resourceVersion) does, by the caller.
func nodeMatters(a, b *corev1.Node) bool {
	return a.UID != b.UID || !reflect.DeepEqual(a.Labels, b.Labels) ||
		!reflect.DeepEqual(a.Annotations, b.Annotations) ||
		!a.Status.Capacity.Memory().Equal(*b.Status.Capacity.Memory())
}

// Run starts the informers, waits for their caches, and reconciles until ctx ends.
func (p *Publisher) Run(ctx context.Context) error {
	defer p.queue.ShutDown()
	p.start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), p.synced...) {
		return errors.New("the node and slice caches did not sync")
	}
	klog.InfoS("caches synced; publishing", "driver", dra.DriverName)
	p.queue.Add(key)
	if p.templates != nil {
		// Waited for apart: a cluster without the recommendations' CRD still gets its slices.
		go func() {
			p.templates.start(ctx.Done())
			if cache.WaitForCacheSync(ctx.Done(), p.templates.synced...) {
				klog.InfoS("recommendation, namespace and template caches synced; keeping templates",
					"namespaces", p.cfg.TemplateNamespaces.String())
				p.queue.Add(templateKey)
			}
		}()
	}
	go func() {
		<-ctx.Done()
		p.queue.ShutDown()
	}()
	for {
		item, quit := p.queue.Get()
		if quit {
			return nil
		}
		var err error
		if item == templateKey {
			err = p.templates.reconcile(ctx, p.client, p.cfg.CallTimeout)
		} else {
			err = p.Reconcile(ctx)
		}
		if err != nil {
			klog.ErrorS(err, "reconcile failed; retrying", "what", item)
			p.queue.AddRateLimited(item)
		} else {
			p.queue.Forget(item)
		}
		p.queue.Done(item)
	}
}

// Reconcile makes one pass: the desired slices from the cached nodes, the changes from the
// cached tmc.dev slices, each change an API call bounded by CallTimeout. A conflict (the cache
// was behind) fails the pass, which is retried.
func (p *Publisher) Reconcile(ctx context.Context) error {
	nodes, err := p.nodes.List(labels.Everything())
	if err != nil {
		return err
	}
	desired, skipped, err := Desired(nodes, p.cfg.Pools, p.cfg.Options)
	if err != nil {
		return err
	}
	for _, s := range skipped {
		klog.InfoS("node publishes no slices: its capacity cannot be read", "node", s.Node, "reason", s.Reason.Error())
	}
	if lost := Unselectable(nodes, desired); len(lost) > 0 {
		klog.InfoS("rack pool members their pool's slice cannot select (no "+HostnameLabel+" label, or one another node carries)", "nodes", lost)
	}
	cached, err := p.slices.List(labels.Everything())
	if err != nil {
		return err
	}
	stored := make([]resourceapi.ResourceSlice, 0, len(cached))
	for _, s := range cached {
		stored = append(stored, *s)
	}
	return Apply(ctx, p.client, Diff(stored, desired), p.cfg.CallTimeout)
}

// Apply makes the changes: creates and updates first (a pool's new generation in place), then
// deletes, each call bounded by timeout. Every change is tried; the errors are joined.
func Apply(ctx context.Context, client kubernetes.Interface, c Changes, timeout time.Duration) error {
	api := client.ResourceV1().ResourceSlices()
	var errs []error
	call := func(what, name string, f func(context.Context) error) {
		cctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		if err := f(cctx); err != nil {
			errs = append(errs, fmt.Errorf("%s %s: %w", what, name, err))
			return
		}
		klog.V(2).InfoS("slice written", "verb", what, "slice", name)
	}
	for i := range c.Create {
		s := &c.Create[i]
		call("create", s.Name, func(ctx context.Context) error {
			_, err := api.Create(ctx, s, metav1.CreateOptions{FieldManager: "tmc-dra-publisher"})
			return err
		})
	}
	for i := range c.Update {
		s := &c.Update[i]
		call("update", s.Name, func(ctx context.Context) error {
			_, err := api.Update(ctx, s, metav1.UpdateOptions{FieldManager: "tmc-dra-publisher"})
			return err
		})
	}
	for _, d := range c.Delete {
		call("delete", d.Name, func(ctx context.Context) error {
			// The UID as a precondition: only the slice Diff saw is deleted, never another of
			// the same name made since.
			err := api.Delete(ctx, d.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &d.UID}})
			if apierrors.IsNotFound(err) {
				return nil // gone already, with its node
			}
			return err
		})
	}
	klog.InfoS("slices reconciled", "created", len(c.Create), "updated", len(c.Update), "deleted", len(c.Delete), "failed", len(errs))
	return errors.Join(errs...)
}
