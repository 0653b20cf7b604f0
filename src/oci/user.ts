/**
 * Who the container process runs as. Pure: the caller reads `/etc/passwd` and `/etc/group` from the
 * container's own root filesystem (host-user.ts `readUserDatabase`) and passes the text in.
 *
 * Precedence (containerd `GenerateUserString` + `WithUser`): run_as_username, else run_as_user, else the
 * image's `User` (`uid`, `name`, `uid:gid`, `name:group`, `uid:group`, `name:gid`), else root.
 * run_as_group overrides the group; it needs run_as_user or run_as_username (the CRI says so).
 */
import { SupplementalGroupsPolicy, type LinuxContainerSecurityContext } from '../gen/runtime/v1/api.js';
import { invalidArgument } from '../common/errors.js';
import type { ImageConfig } from './types.js';

/** One line of /etc/passwd. */
export interface PasswdEntry {
  name: string;
  uid: number;
  gid: number;
  home: string;
  shell: string;
}

/** One line of /etc/group. */
export interface GroupEntry {
  name: string;
  gid: number;
  members: string[];
}

/** What the request and the image say about the user. */
export interface UserRequest {
  runAsUser?: bigint | number;
  runAsUsername?: string;
  runAsGroup?: bigint | number;
  /** The image config's `User`. */
  imageUser?: string;
  supplementalGroups?: readonly (bigint | number)[];
  /** Merge (default): add the user's groups from the image's /etc/group. Strict: only the configured ones. */
  supplementalGroupsPolicy?: SupplementalGroupsPolicy;
}

/** The identity the process gets; also what ContainerStatus reports as `user.linux`. */
export interface ResolvedUser {
  uid: number;
  gid: number;
  /** Supplementary groups, sorted, always including `gid` (what `id -G` shows). */
  additionalGids: number[];
  /** The user's name when known (from the request or the image's /etc/passwd). */
  username?: string;
}

/** runc accepts ids up to 2^31-1. */
const MAX_ID = 2 ** 31 - 1;

/** Parses /etc/passwd; malformed lines are skipped, as libc does. */
export function parsePasswd(text: string): PasswdEntry[] {
  const out: PasswdEntry[] = [];
  for (const line of text.split('\n')) {
    const t = line.trim();
    if (!t || t.startsWith('#')) continue;
    const f = t.split(':');
    if (f.length < 4 || !/^\d+$/.test(f[2]!) || !/^\d+$/.test(f[3]!)) continue;
    out.push({ name: f[0]!, uid: Number(f[2]), gid: Number(f[3]), home: f[5] ?? '', shell: f[6] ?? '' });
  }
  return out;
}

/** Parses /etc/group; malformed lines are skipped. */
export function parseGroup(text: string): GroupEntry[] {
  const out: GroupEntry[] = [];
  for (const line of text.split('\n')) {
    const t = line.trim();
    if (!t || t.startsWith('#')) continue;
    const f = t.split(':');
    if (f.length < 3 || !/^\d+$/.test(f[2]!)) continue;
    const members = (f[3] ?? '').split(',').map((m) => m.trim()).filter(Boolean);
    out.push({ name: f[0]!, gid: Number(f[2]), members });
  }
  return out;
}

/** The user-related fields of a container's security context plus the image's User. */
export function userRequestFrom(sc: LinuxContainerSecurityContext | undefined, image: ImageConfig): UserRequest {
  return {
    runAsUser: sc?.runAsUser?.value,
    runAsUsername: sc?.runAsUsername || undefined,
    runAsGroup: sc?.runAsGroup?.value,
    imageUser: image.User || undefined,
    supplementalGroups: sc?.supplementalGroups ?? [],
    supplementalGroupsPolicy: sc?.supplementalGroupsPolicy ?? SupplementalGroupsPolicy.Merge,
  };
}

/**
 * Resolves the process identity. `passwdText`/`groupText` are the files from the container's rootfs, or
 * null when missing. A user or group name that is not in those files is an InvalidArgument error; a
 * numeric uid without an entry runs with gid 0 (Docker and containerd do the same).
 */
export function resolveUser(passwdText: string | null, groupText: string | null, req: UserRequest): ResolvedUser {
  const passwd = passwdText === null ? null : parsePasswd(passwdText);
  const groups = groupText === null ? null : parseGroup(groupText);
  const { userPart, groupPart } = userAndGroupParts(req);

  let uid: number;
  let entry: PasswdEntry | undefined;
  if (isNumeric(userPart)) {
    uid = checkId(userPart, 'uid', req);
    entry = passwd?.find((p) => p.uid === uid);
  } else {
    entry = passwd?.find((p) => p.name === userPart);
    if (!entry) {
      throw invalidArgument(
        `unable to find user ${userPart}: no matching entries in passwd file${passwd === null ? ' (the image has no /etc/passwd)' : ''}`,
      );
    }
    uid = entry.uid;
  }

  let gid: number;
  if (groupPart === undefined) gid = entry?.gid ?? 0;
  else if (isNumeric(groupPart)) gid = checkId(groupPart, 'gid', req);
  else {
    const g = groups?.find((x) => x.name === groupPart);
    if (!g) {
      throw invalidArgument(
        `unable to find group ${groupPart}: no matching entries in group file${groups === null ? ' (the image has no /etc/group)' : ''}`,
      );
    }
    gid = g.gid;
  }

  const username = isNumeric(userPart) ? entry?.name : userPart;
  const gids = new Set<number>([gid]);
  for (const g of req.supplementalGroups ?? []) gids.add(checkId(String(g), 'supplemental group', req));
  if ((req.supplementalGroupsPolicy ?? SupplementalGroupsPolicy.Merge) === SupplementalGroupsPolicy.Merge && username) {
    for (const g of groups ?? []) if (g.members.includes(username)) gids.add(g.gid);
  } else if (
    req.supplementalGroupsPolicy !== undefined &&
    req.supplementalGroupsPolicy !== SupplementalGroupsPolicy.Merge &&
    req.supplementalGroupsPolicy !== SupplementalGroupsPolicy.Strict
  ) {
    throw invalidArgument(`unknown supplemental_groups_policy ${req.supplementalGroupsPolicy}`);
  }
  return { uid, gid, additionalGids: [...gids].sort((a, b) => a - b), ...(username ? { username } : {}) };
}

/** The `user[:group]` parts from the request, falling back to the image's User, then root. */
function userAndGroupParts(req: UserRequest): { userPart: string; groupPart?: string } {
  let userPart = '';
  if (req.runAsUser !== undefined) userPart = String(req.runAsUser);
  if (req.runAsUsername) userPart = req.runAsUsername;
  const groupPart = req.runAsGroup !== undefined ? String(req.runAsGroup) : undefined;
  if (userPart) return { userPart, groupPart };
  if (groupPart !== undefined) {
    throw invalidArgument(`run_as_group ${groupPart} is specified without run_as_user or run_as_username`);
  }
  const image = (req.imageUser ?? '').trim();
  if (!image) return { userPart: '0' };
  const parts = image.split(':');
  if (parts.length > 2 || !parts[0]) throw invalidArgument(`invalid image User "${image}": want uid, name, uid:gid or name:group`);
  return parts.length === 2 && parts[1] ? { userPart: parts[0], groupPart: parts[1] } : { userPart: parts[0] };
}

function isNumeric(s: string): boolean {
  return /^-?\d+$/.test(s);
}

function checkId(s: string, what: string, req: UserRequest): number {
  const n = Number(s);
  if (!Number.isInteger(n) || n < 0 || n > MAX_ID) {
    const source = req.runAsUser !== undefined || req.runAsUsername ? 'security context' : 'image User';
    throw invalidArgument(`invalid ${what} ${s} (from the ${source}): must be between 0 and ${MAX_ID}`);
  }
  return n;
}
