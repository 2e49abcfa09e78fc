// Package deploy checks the deployment files of abacus (docker-compose.yml at the repository's
// root and the Kubernetes manifests under deploy/k8s) with the loaders their users run: it is a
// module of its own so that their heavy dependencies never reach the abacus module.
package deploy
