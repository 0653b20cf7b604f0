/**
 * What the registry client uses of undici, imported lazily through this module (see http.ts): a
 * CommonJS package imported lazily straight away has only a default export in the daemon's bundle
 * (scripts/bundle.mjs), while a static import here gets its named exports in both builds.
 */
export { Agent, request } from 'undici';
