/**
 * Writes one R2 object from bytes that arrive in pieces, holding at most one part in memory:
 * R2's multipart upload, every part exactly `partBytes` (R2 wants all parts but the last of one
 * size, at least 5 MiB), the last one whatever is left. A file under one part is one `put`. The
 * object exists only once `finish` completes it: a writer cut short leaves nothing readable
 * (`abort` frees its parts; an unfinished upload R2 expires by itself).
 *
 * A writer may resume an upload a previous run started (`resume`): its upload id and the parts it
 * had uploaded, each `partBytes` long, so the next byte written is byte `parts × partBytes` of
 * the object. `onPart` is told after each part, to store that state.
 */

/** R2's smallest part but the last. */
export const MIN_PART_BYTES = 5 * 1024 * 1024;
/** R2's most parts a multipart upload. */
export const MAX_PARTS = 10_000;

export interface UploadState {
	uploadId: string;
	parts: R2UploadedPart[];
}

export class R2PartWriter {
	#buf: Uint8Array;
	#fill = 0;
	#upload: R2MultipartUpload | null = null;
	#parts: R2UploadedPart[] = [];

	constructor(
		private readonly bucket: R2Bucket,
		private readonly key: string,
		private readonly partBytes: number,
		resume: UploadState | null = null,
		private readonly onPart: (state: UploadState) => Promise<void> | void = () => {},
	) {
		this.#buf = new Uint8Array(partBytes);
		if (resume) {
			this.#upload = bucket.resumeMultipartUpload(key, resume.uploadId);
			this.#parts = [...resume.parts];
		}
	}

	/** Bytes of the object in the parts uploaded so far. */
	get uploaded(): number {
		return this.#parts.length * this.partBytes;
	}

	/** Bytes of the object so far (uploaded and buffered). */
	get written(): number {
		return this.uploaded + this.#fill;
	}

	async write(chunk: Uint8Array): Promise<void> {
		let from = 0;
		while (from < chunk.length) {
			const n = Math.min(chunk.length - from, this.partBytes - this.#fill);
			this.#buf.set(chunk.subarray(from, from + n), this.#fill);
			this.#fill += n;
			from += n;
			if (this.#fill === this.partBytes) await this.#flush();
		}
	}

	async #flush(): Promise<void> {
		if (this.#parts.length + 1 >= MAX_PARTS) throw new Error(`an R2 object of more than ${MAX_PARTS} parts`);
		this.#upload ??= await this.bucket.createMultipartUpload(this.key);
		const part = await this.#upload.uploadPart(this.#parts.length + 1, this.#buf.subarray(0, this.#fill));
		this.#parts.push(part);
		this.#fill = 0;
		await this.onPart({ uploadId: this.#upload.uploadId, parts: this.#parts });
	}

	/** Completes the object; its size in bytes. */
	async finish(): Promise<number> {
		const size = this.written;
		if (!this.#upload) {
			await this.bucket.put(this.key, this.#buf.subarray(0, this.#fill));
		} else {
			if (this.#fill > 0) {
				this.#parts.push(await this.#upload.uploadPart(this.#parts.length + 1, this.#buf.subarray(0, this.#fill)));
				this.#fill = 0;
			}
			await this.#upload.complete(this.#parts);
		}
		return size;
	}

	/** Drops what was uploaded (never throws: the upload may be gone already). */
	async abort(): Promise<void> {
		this.#fill = 0;
		await this.#upload?.abort().catch(() => {});
	}
}
