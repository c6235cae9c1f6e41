package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Group is the API group of every tmc object, label and annotation.
const Group = "tmc.dev"

// SchemeGroupVersion is the group and version of these types.
var SchemeGroupVersion = schema.GroupVersion{Group: Group, Version: "v1alpha1"}

// Resource is the resource of TieredRecommendation objects, for clients that read them.
var Resource = SchemeGroupVersion.WithResource("tieredrecommendations")

var (
	// SchemeBuilder registers the types with a scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds the types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(SchemeGroupVersion, &TieredRecommendation{}, &TieredRecommendationList{})
	metav1.AddToGroupVersion(scheme, SchemeGroupVersion)
	return nil
}
