// Merged into the builder's configuration (package.json: jupyterlab.webpackConfig).
// The default 'deterministic' module ids hash each module's identifier, and the container
// entry's identifier holds the absolute paths of what it exposes: built in another directory,
// the bundle's bytes (and file names) would differ. Ids by order of appearance do not.
module.exports = {
  optimization: {
    moduleIds: 'natural'
  }
};
