// Package controllers stands in for sigs.k8s.io/mcs-api/controllers, which the Go module
// proxy here does not serve at any version. Cilium v1.20.2 reads one name from it: the
// annotation that marks a Service derived from a multi-cluster ServiceImport (KEP-1645).
// The sandbox runs no cluster mesh, so nothing else of the package is needed.
package controllers

// DerivedServiceAnnotation is set on the Service derived from a ServiceImport.
const DerivedServiceAnnotation = "multicluster.kubernetes.io/derived-service"
